#pragma once
// The message of the InputError a call throws, for tests of bad input: fails the test when it
// throws nothing, and checks the exit code such an error gives (2).
#include <gtest/gtest.h>

#include <string>

#include "loom/core/error.h"

namespace loom::testing {

template <class Fn>
std::string input_error(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

}  // namespace loom::testing
