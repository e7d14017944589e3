#pragma once
// The world communicator of a multi-rank test binary (set up by tests/dist/test_main.cpp).
#include "loom/dist/communicator.h"

namespace loom::test {
dist::Communicator& world();
}  // namespace loom::test
