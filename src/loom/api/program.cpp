#include "loom/api/program.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "loom/core/error.h"
#include "loom/dist/input_agreement.h"
#include "loom/nccl/backend.h"

namespace loom {
namespace {

// The seconds in environment variable `name`, or `fallback` when it is not set. InputError for a
// value that is not a number of seconds: positive, or also 0 where `zero_means` says what 0 does.
double seconds_from_env(const char* name, double fallback, const char* zero_means = nullptr) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  const bool zero_ok = zero_means != nullptr && seconds == 0;
  LOOM_CHECK_INPUT(end != text && *end == '\0' && (seconds > 0 || zero_ok) && std::isfinite(seconds),
                   "{} = \"{}\" is not a {}number of seconds{}", name, text, zero_means ? "" : "positive ",
                   zero_means ? fmt::format(" (0 {})", zero_means) : "");
  return seconds;
}

// Errors before there is a runtime: one process, nobody to end.
int startup_failure(const std::exception& e, int code) {
  std::cerr << "loom: error: " << e.what() << '\n';
  return code;
}

int guarded(dist::Runtime& runtime, const std::function<void(dist::Runtime&)>& body) {
  const int rank = runtime.world().rank(), size = runtime.world().size();
  // A failure at run time on any rank ends every rank: print it, then abort the whole job.
  auto fail = [&](const char* what, int code) {
    std::cerr << (size > 1 ? fmt::format("loom: error: [rank {}] {}\n", rank, what) : fmt::format("loom: error: {}\n", what))
              << std::flush;
    if (size > 1) runtime.abort_all(code);
    return code;
  };
  try {
    body(runtime);
    return 0;
  } catch (const AgreedError& e) {  // every rank stopped at the same point: rank 0 says why
    if (rank == 0) std::cerr << (e.is_error() ? "loom: error: " : "loom: ") << e.what() << '\n' << std::flush;
    return e.exit_code();
  } catch (const dist::SilentInputError&) {
    return 2;  // the first rank that refused the input printed why
  } catch (const dist::AgreedInputError& e) {
    std::cerr << "loom: error: " << e.what() << '\n';
    return 2;
  } catch (const InputError& e) {
    if (size == 1) {
      std::cerr << "loom: error: " << e.what() << '\n';
      return 2;
    }
    return fail(e.what(), 2);  // refused on this rank alone: the others must not wait for it
  } catch (const Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}

}  // namespace

int run_program(const std::function<void(dist::Runtime&)>& body) {
  std::unique_ptr<dist::Runtime> runtime;
  try {
    const double timeout_s = seconds_from_env("LOOM_COMM_TIMEOUT_S", 300);
    const double heartbeat_s = seconds_from_env("LOOM_HEARTBEAT_S", 10, "turns the heartbeat off");
    LOOM_CHECK_INPUT(heartbeat_s == 0 || heartbeat_s >= 1,
                     "LOOM_HEARTBEAT_S = {:g} s is too short to tell a lost host from a busy one; hint: 1 s or more "
                     "(10 by default), or 0 to turn the heartbeat off",
                     heartbeat_s);
    runtime = std::make_unique<dist::Runtime>(timeout_s, heartbeat_s);
    runtime->set_device_backend(nccl::make_backend(timeout_s));  // loads nothing until a GPU rank asks
  } catch (const InputError& e) {  // a launch loom cannot run under (srun without PMI), a bad time-out
    return startup_failure(e, 2);
  } catch (const std::exception& e) {
    return startup_failure(e, 1);
  }
  return guarded(*runtime, body);
}

}  // namespace loom
