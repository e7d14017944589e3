#pragma once
// What every fuzz target shares (tests/fuzz/README.md): the reader contract, the input split into
// parts, and the scratch files a reader of paths reads.
//
// NOTE [Reader contract]: a reader of user bytes either returns a value that keeps its documented
// invariants or throws loom::InputError (bad input: one error line, exit 2). Anything else is a
// finding: another exception (a std::out_of_range from a stoi, a loom::Error where input was the
// problem), a crash or undefined behaviour (AddressSanitizer, UndefinedBehaviorSanitizer), a hang
// (libFuzzer's -timeout), an allocation past -malloc_limit_mb (a header cannot make loom allocate
// without bound), or a file descriptor left open after a refusal.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "loom/core/error.h"

namespace loom::fuzz {

// A finding: says what broke and aborts, so libFuzzer saves the input as a crash.
[[noreturn]] inline void fail(std::string_view what) {
  std::fprintf(stderr, "loom fuzz: contract broken: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

inline void require(bool ok, std::string_view what) {
  if (!ok) fail(what);
}

// The lowest free descriptor: the same before and after a call unless the call leaked one.
inline int lowest_free_fd() {
  const int fd = ::dup(2);
  ::close(fd);
  return fd;
}

// Runs `read` under the contract: InputError is a refusal and fine; any other exception and any
// descriptor left open are findings. Returns true when `read` returned (its value was checked).
template <class Read>
bool expect_contract(Read&& read) {
  const int fd = lowest_free_fd();
  bool returned = false;
  try {
    read();
    returned = true;
  } catch (const loom::InputError&) {
  } catch (const std::exception& e) {
    fail(std::string("not an InputError: ") + typeid(e).name() + ": " + e.what());
  }
  require(lowest_free_fd() == fd, "a file descriptor was left open");
  return returned;
}

// The input as text.
inline std::string_view text_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input's parts: text up to each line "%%" (the separator line is dropped); one part when
// there is none. Seeds are written by hand this way (tests/fuzz/corpus/).
inline std::vector<std::string_view> parts(std::string_view input, size_t most) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < most) {
    const size_t at = input.starts_with("%%\n") ? 0 : input.find("\n%%\n");
    if (at == std::string_view::npos) break;
    out.push_back(input.substr(0, at));
    input.remove_prefix(at == 0 ? 3 : at + 4);
  }
  out.push_back(input);
  return out;
}

// The lines of `text` (without their newlines).
inline std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// A scratch directory of this process, in memory (/dev/shm) where there is one; removed at exit.
class Scratch {
 public:
  static const std::filesystem::path& dir() {
    static Scratch scratch;
    return scratch.dir_;
  }
  // Writes `bytes` to dir()/name and returns the path.
  static std::string write(const std::string& name, std::string_view bytes) {
    const std::filesystem::path path = dir() / name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot write a scratch file");
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) fail("cannot write a scratch file");
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return path.string();
  }
  static void remove(const std::string& name) {
    std::error_code ec;
    std::filesystem::remove(dir() / name, ec);
  }

 private:
  Scratch() {
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    dir_ = base / ("loom-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

}  // namespace loom::fuzz
