#pragma once
// A trainable parameter: its full (unsharded) name and shape, the part of it this rank holds, and
// its value and gradient. Gradients accumulate across micro-batches until the optimizer step.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "loom/core/rng.h"

namespace loom::nn {

enum class Init { Zeros, Ones, Normal };

struct Param {
  std::string name;                 // e.g. "blocks.3.attn.qkv.weight"
  std::vector<int64_t> full_shape;  // shape of the unsharded parameter
  Shard shard;                      // which slice of it this rank holds (dim -1 = all)
  Init init = Init::Zeros;
  double init_std = 0.0;            // for Init::Normal
  bool weight_decay = false;        // AdamW decays matrices, not biases or norm gains
  // The gradient covers only this tp rank's tokens (a sequence-sharded norm or position table
  // under parallel.tp_sequence) and is summed over tp once per step (SequenceGradReducer).
  bool tp_partial = false;
  at::Tensor value;
  at::Tensor grad;                  // same shape as value; zeroed by zero_grad

  int64_t numel() const { return value.defined() ? value.numel() : 0; }
};

// Allocates value and grad and fills value from (seed, name): layout-independent.
void initialise(Param& p, uint64_t seed, at::ScalarType dtype);
void zero_grad(Param& p);

}  // namespace loom::nn
