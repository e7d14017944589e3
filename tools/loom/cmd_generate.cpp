// placeholder: `loom generate` (issue 18), filled in by its own commit
#include "commands.h"

namespace loom::cli {
Action add_generate(CLI::App&) { return [](dist::Runtime&) {}; }
}  // namespace loom::cli
