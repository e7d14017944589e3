#pragma once
// Reading the TOML text of a config (a file, or one `--set` value) with errors that name the key:
// a number TOML cannot hold is reported with its key and range (NOTE [Numbers a key can hold]), and
// text TOML cannot hold (not UTF-8) is refused. core/config.cpp maps what is read onto the keys.
#include <toml++/toml.h>

#include <optional>
#include <string_view>

namespace loom {

// Parses a whole config text; throws InputError "origin:line: key = value is out of range ..." or
// "origin:line:column: <the parser's reason>".
toml::table parse_toml(std::string_view text, std::string_view origin);

// Parses the value of `--set key=value` as TOML ("v = value"). Throws InputError naming `what`
// (the origin and key) for a number TOML cannot hold; nullopt for other text that is not TOML,
// which the caller takes as a string.
std::optional<toml::table> parse_set_value(std::string_view value, std::string_view what);

// `s` without the spaces, tabs and carriage returns around it.
std::string_view trim(std::string_view s);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view text);

}  // namespace loom
