#pragma once
// Bytes of one element, by what it holds (NOTE [Mixed precision]): the plan's memory estimate,
// its traffic per step and `loom simulate` count with these, so they agree with each other.
#include <cstdint>

#include "loom/core/config.h"

namespace loom::plan {

// A parameter's master value (bfloat16 keeps float32 masters).
int64_t master_bytes(const ModelConfig& m);
// An activation element.
int64_t activation_bytes(const ModelConfig& m);
// A parameter's copy for the products (bfloat16's), 0 where the products read the masters.
int64_t compute_copy_bytes(const ModelConfig& m);
// A gradient element as it crosses the replicas: parallel.grad_dtype's width, or the master's.
int64_t grad_wire_bytes(const Config& c);

}  // namespace loom::plan
