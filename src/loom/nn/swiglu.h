#pragma once
// The SwiGLU activation, silu(gate) * up, on a packed [..., 2h] tensor laid out as [gate | up].
// Packed, gate and up come out of one linear; a column-parallel linear with groups = 2 splits each
// block separately (as qkv does with groups = 3), so every tp rank's output is again
// [gate | up] of its h / tp hidden units and the kernel runs on it unchanged.
//
// Backward needs only the packed input, which the owner keeps from forward.
#include <ATen/ATen.h>

namespace loom::nn {

at::Tensor swiglu_forward(const at::Tensor& gate_up);                        // [..., 2h] -> [..., h]
at::Tensor swiglu_backward(const at::Tensor& dy, const at::Tensor& gate_up);  // [..., h] -> [..., 2h]

// The hidden width of a SwiGLU MLP with the parameter count of a plain MLP of width
// ffn_mult * d_model (two thirds of it, since SwiGLU has three matrices instead of two), rounded
// up to a multiple of `multiple_of`. E.g. d_model 4096, ffn_mult 4, multiple_of 256 -> 11008.
int64_t swiglu_hidden(int64_t d_model, int64_t ffn_mult, int64_t multiple_of);

}  // namespace loom::nn
