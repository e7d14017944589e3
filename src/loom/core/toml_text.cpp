#include "loom/core/toml_text.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "loom/core/error.h"

namespace loom {
namespace {

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

// NOTE [Numbers a key can hold]
// An integer key holds a 64-bit integer and a float key a finite double. TOML refuses a literal beyond
// either range with a parse error ("'...' is not representable in 64 bits") that names neither the key
// nor the range, and `--set` would read such a value as a string and then say "got a string". Both
// report the number instead: the key, the value and the range. TOML also reads inf and nan as floats;
// check_finite refuses them for every float key of the table, so a new float key is covered too.

// The range problem of a number TOML refused ("is out of range of ..."), or "" if it has another
// one. The parser says "not representable in 64 bits", or for a float read through a stream only
// "could not be interpreted"; strtod tells a float's range then (and too large from too small).
std::string range_problem(std::string_view description, std::string_view number) {
  const bool beyond = description.find("not representable in 64 bits") != std::string_view::npos;
  if (description.find("floating-point") == std::string_view::npos) {
    if (!beyond) return "";
    return fmt::format("is out of range of a 64-bit integer ({} to {})", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max());
  }
  std::string digits;
  for (char c : number)
    if (c != '_') digits += c;
  errno = 0;
  const double value = std::strtod(digits.c_str(), nullptr);
  if (errno == ERANGE && std::abs(value) < 1)
    return "is too close to 0 for a 64-bit float; hint: write 0 if you mean 0";
  if (errno == ERANGE || beyond) return "is out of range of a 64-bit float (magnitudes up to about 1.8e308)";
  return "";
}

// What is wrong with a number TOML refused: its range, else the parser's reason.
std::string number_problem(std::string_view description, std::string_view number) {
  const std::string range = range_problem(description, number);
  if (!range.empty()) return range;
  const size_t colon = description.find(": ");
  return fmt::format("is not a number TOML can read ({})",
                     colon == std::string_view::npos ? description : description.substr(colon + 2));
}

// An unquoted value that a user meant as a number: a sign, a digit (or .digit), then number characters.
bool looks_like_number(std::string_view value) {
  if (value.starts_with('+') || value.starts_with('-')) value.remove_prefix(1);
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (value.empty() || !(digit(value[0]) || (value.size() > 1 && value[0] == '.' && digit(value[1])))) return false;
  return value.find_first_not_of("0123456789abcdefABCDEF_.+-xo") == std::string_view::npos;
}

// The assignment on 1-based `line` of a TOML text as {"section.key", "value"}; {"", ""} if it has none.
std::pair<std::string, std::string> assignment_on_line(std::string_view text, size_t line) {
  std::string section;
  size_t pos = 0;
  for (size_t n = 1; n < line && pos != std::string_view::npos; ++n) {
    const std::string_view l = trim(text.substr(pos, text.find('\n', pos) - pos));
    if (l.starts_with('[') && l.find(']') != std::string_view::npos)
      section = trim(l.substr(1, l.find(']') - 1));
    pos = text.find('\n', pos);
    if (pos != std::string_view::npos) ++pos;
  }
  if (pos == std::string_view::npos) return {};
  const std::string_view l = text.substr(pos, text.find('\n', pos) - pos);
  const size_t eq = l.find('=');
  if (eq == std::string_view::npos || trim(l).starts_with('[')) return {};
  const std::string_view key = trim(l.substr(0, eq));
  const std::string_view value = trim(l.substr(eq + 1, l.find('#', eq) - eq - 1));
  return {section.empty() ? std::string(key) : fmt::format("{}.{}", section, key), std::string(value)};
}

// The number a TOML parse error quotes ("... '123...' is not ..."), or "".
std::string_view quoted_number(std::string_view description) {
  const size_t quote = description.find('\'');
  if (quote == std::string_view::npos) return {};
  return description.substr(quote + 1, description.find('\'', quote + 1) - quote - 1);
}

}  // namespace

toml::table parse_toml(std::string_view text, std::string_view origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto [line, column] = std::pair{e.source().begin.line, e.source().begin.column};
    const std::string_view description = e.description();
    const std::string_view number = quoted_number(description);
    const std::string range = range_problem(description, number);
    const auto [key, value] = assignment_on_line(text, line);
    if (range.empty() || key.empty())
      throw InputError(fmt::format("{}:{}:{}: {}", origin, line, column, description));
    // The value as written, or the number alone where it stands in an array.
    throw InputError(fmt::format("{}:{}: {} {}", origin, line,
                                 looks_like_number(value) ? fmt::format("{} = {}", key, value)
                                                          : fmt::format("{}: {}", key, number),
                                 range));
  }
}

std::optional<toml::table> parse_set_value(std::string_view value, std::string_view what) {
  try {
    return toml::parse(fmt::format("v = {}", value));
  } catch (const toml::parse_error& e) {
    // A number TOML cannot hold (NOTE [Numbers a key can hold]), alone or in an array; else text.
    const std::string_view description = e.description();
    LOOM_CHECK_INPUT(!looks_like_number(value), "{} = {} {}", what, value, number_problem(description, value));
    const std::string range = range_problem(description, quoted_number(description));
    LOOM_CHECK_INPUT(range.empty(), "{} = {}: {} {}", what, value, quoted_number(description), range);
    return std::nullopt;
  }
}

bool is_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = b(i);
    size_t n = 1;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (narrower where forms are banned)
    if (c < 0x80) n = 1;
    else if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + n > text.size() || (n > 1 && (b(i + 1) < lo || b(i + 1) > hi))) return false;
    for (size_t k = 2; k < n; ++k)
      if (b(i + k) < 0x80 || b(i + k) > 0xBF) return false;
    i += n;
  }
  return true;
}

}  // namespace loom
