#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "selected_tests.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);  // ctest runs two test processes at once on two cores
  const int failed = RUN_ALL_TESTS();
  return loom::test::selected_no_test("loom unit tests") ? 1 : failed;
}
