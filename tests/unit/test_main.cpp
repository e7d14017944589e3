#include <ATen/Parallel.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);  // ctest runs two test processes at once on two cores
  return RUN_ALL_TESTS();
}
