#pragma once
// An interval of the step for the trace: (name, category, begin, end); may be empty.
#include <chrono>
#include <functional>

namespace loom::replicas {

using Timeline = std::function<void(const char*, const char*, std::chrono::steady_clock::time_point,
                                    std::chrono::steady_clock::time_point)>;

// The category of ZeRO-2/3's gathers and reduce-scatters, which run beside the compute (their own
// track in the trace).
inline constexpr const char* kShardedTraffic = "zero";

}  // namespace loom::replicas
