#pragma once
// What a layer does with the activations its forward saves for backward, per layer and decided
// by the run plan (plan/run_plan.h); the pipeline executor asks it in one place
// (NOTE [Memory policy]).
//   keep       the saved state stays in memory from forward to backward (the default)
//   recompute  only the layer's input is kept; forward runs again just before backward
//   swap       the saved state moves to a host tier after forward and back before backward
//              (NOTE [Swap tier]); a layer's saved state names its tensors
//              (SavedState::for_each_tensor), so no layer knows it was moved
#include <array>
#include <cstdint>
#include <string_view>

namespace loom::nn {

enum class MemoryPolicy : uint8_t { Keep, Recompute, Swap };

inline constexpr std::array<std::string_view, 3> kMemoryPolicyNames{"keep", "recompute", "swap"};
inline std::string_view name_of(MemoryPolicy p) { return kMemoryPolicyNames[static_cast<size_t>(p)]; }

}  // namespace loom::nn
