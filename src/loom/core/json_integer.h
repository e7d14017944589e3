#pragma once
// NOTE [Integers in JSON]: nlohmann's get<int64_t>() (and get<int>(), and get<std::vector<int64_t>>()
// element by element) converts a JSON float with a plain cast: 1.5 reads as 1, and 1e300 is
// undefined behaviour. It also narrows a 64-bit integer to an int without a word (4294967297 -> 1).
// loom's readers of JSON files (token sidecars, checkpoint manifests and tensor headers, profiles)
// read every integer field through json_integer: a JSON integer that fits the type, else the
// type_error nlohmann itself throws for a wrong type, which each reader already turns into an
// InputError naming its file.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom {

template <class Int = int64_t>
Int json_integer(const nlohmann::json& j) {
  constexpr auto lo = std::numeric_limits<Int>::min();
  constexpr auto hi = std::numeric_limits<Int>::max();
  const bool fits = j.is_number_unsigned() ? j.get<uint64_t>() <= static_cast<uint64_t>(hi)
                    : j.is_number_integer() ? j.get<int64_t>() >= lo && j.get<int64_t>() <= hi
                                            : false;
  if (!fits)
    throw nlohmann::json::type_error::create(
        302, std::string(j.is_number_integer() ? "integer out of range" : "type must be an integer, but is ") +
                 (j.is_number_integer() ? "" : j.type_name()),
        &j);
  return static_cast<Int>(j.get<int64_t>());
}

// An array of integers, each read as json_integer.
inline std::vector<int64_t> json_integers(const nlohmann::json& j) {
  if (!j.is_array())
    throw nlohmann::json::type_error::create(302, std::string("type must be an array, but is ") + j.type_name(), &j);
  std::vector<int64_t> out;
  for (const auto& item : j) out.push_back(json_integer(item));
  return out;
}

}  // namespace loom
