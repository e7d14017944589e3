#include "loom/version.h"

namespace loom {

const char* version() { return kVersion; }

}  // namespace loom
