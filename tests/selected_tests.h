#pragma once
// After RUN_ALL_TESTS: whether its filter selected no test at all (a renamed test or a stale
// --gtest_filter would otherwise pass without testing anything); says so on stderr.
#include <gtest/gtest.h>

#include <cstdio>

namespace loom::test {

inline bool selected_no_test(const char* program) {
  if (::testing::UnitTest::GetInstance()->test_to_run_count() > 0) return false;
  std::fprintf(stderr, "%s: --gtest_filter='%s' selects no test\n", program, GTEST_FLAG_GET(filter).c_str());
  return true;
}

}  // namespace loom::test
