#pragma once
// Errors. Library code never exits: it throws, and the CLI turns the exception into one line
// `loom: error: <message>` on stderr and the exception's exit code.
//
//   LOOM_CHECK(cond, fmt, args...)        a broken invariant or runtime failure  -> exit 1
//   LOOM_CHECK_INPUT(cond, fmt, args...)  bad input (config, data, flags)        -> exit 2
//
// Messages carry the values involved and, where the user can act, a hint.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Bad input: refused before any work starts; the CLI exits with code 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message, 2) {}
};

// An error every rank raised at the same point, after a collective made them agree (a non-finite
// loss, an interruption): rank 0 prints it and every rank exits with its code, so no rank needs to
// end the others. Printed as `loom: error: <message>`, or as `loom: <message>` when it is not an
// error but a requested stop.
class AgreedError : public Error {
 public:
  AgreedError(const std::string& message, int exit_code, bool is_error = true)
      : Error(message, exit_code), is_error_(is_error) {}
  bool is_error() const { return is_error_; }

 private:
  bool is_error_;
};

}  // namespace loom

#define LOOM_CHECK(cond, ...)                                  \
  do {                                                         \
    if (!(cond)) throw ::loom::Error(::fmt::format(__VA_ARGS__)); \
  } while (false)

#define LOOM_CHECK_INPUT(cond, ...)                                 \
  do {                                                              \
    if (!(cond)) throw ::loom::InputError(::fmt::format(__VA_ARGS__)); \
  } while (false)
