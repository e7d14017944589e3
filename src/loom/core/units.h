#pragma once
// Byte sizes as users write them ("2GiB", "512MiB", "1.5GB", "4096") and as loom prints them.
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

// Throws InputError naming `what` (e.g. "memory.budget") on a malformed size, and on one that is
// not a number (nan), negative, infinite, or 2^63 bytes (8 EiB) or more.
int64_t parse_bytes(std::string_view text, std::string_view what);

// "0 B", "512 B", "1.50 KiB", "2.00 GiB".
std::string format_bytes(double bytes);

}  // namespace loom
