#pragma once
// Reading the TOML text of a config (a file, or one `--set` value) with errors that name the key:
// a number TOML cannot hold is reported with its key and range (NOTE [Numbers a key can hold]);
// is_utf8 tells whether text is one TOML can hold. core/config.cpp maps what is read onto the keys.
#include <toml++/toml.h>

#include <optional>
#include <string_view>

namespace loom {

// Parses a whole config text. Throws InputError for a number TOML cannot hold, naming the key and
// the range ("origin:line: key = value is out of range of ...", or "key: number ..." for one in an
// array; a float too close to 0 says so), and "origin:line:column: <the parser's reason>" for any
// other error.
toml::table parse_toml(std::string_view text, std::string_view origin);

// Parses the value of `--set key=value` as TOML ("v = value"). Throws InputError naming `what`
// (the origin and key) for a number TOML cannot hold; nullopt for other text that is not TOML,
// which the caller takes as a string.
std::optional<toml::table> parse_set_value(std::string_view value, std::string_view what);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view text);

}  // namespace loom
