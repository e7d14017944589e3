#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);  // ctest runs two test processes at once on two cores
  const int failed = RUN_ALL_TESTS();
  // A filter that selects no test would pass without testing anything (a renamed test).
  if (testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
    std::fprintf(stderr, "loom unit tests: --gtest_filter='%s' selects no test\n", GTEST_FLAG_GET(filter).c_str());
    return 1;
  }
  return failed;
}
