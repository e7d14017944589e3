#pragma once
// What a layer does with the activations its forward saves for backward, per layer and decided
// by the run plan (plan/run_plan.h); the pipeline executor asks it in one place
// (NOTE [Memory policy]).
//   keep       the saved state stays in memory from forward to backward (the default)
//   recompute  only the layer's input is kept; forward runs again just before backward
// Swapping the saved tensors to host memory is the next policy: a layer's saved state names its
// tensors (SavedState::for_each_tensor), so it can be moved without touching the layer.
#include <array>
#include <cstdint>
#include <string_view>

namespace loom::nn {

enum class MemoryPolicy : uint8_t { Keep, Recompute };

inline constexpr std::array<std::string_view, 2> kMemoryPolicyNames{"keep", "recompute"};
inline std::string_view name_of(MemoryPolicy p) { return kMemoryPolicyNames[static_cast<size_t>(p)]; }

}  // namespace loom::nn
