#pragma once
namespace loom {
inline constexpr const char* kVersion = "0.1.0";
}
