#pragma once
// loom's version, written here alone: CMakeLists.txt reads these three lines for the project's
// and the installed package's version (loomConfigVersion.cmake), checkpoints record it, and
// `loom --version` prints it. 0.x: the C++ API (docs/cpp-api.md) may change between minor versions.
#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 2
#define LOOM_VERSION_PATCH 0

namespace loom {
inline constexpr const char* kVersion = "0.2.0";
// The version of the library a program runs with (kVersion is the headers' it was compiled with).
const char* version();
}  // namespace loom
