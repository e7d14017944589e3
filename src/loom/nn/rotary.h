#pragma once
// Rotary position embeddings for q and k of shape [..., T, hd] (e.g. [B, H, T, hd]).
//
// Convention ("rotate half"): dimension i of the first half pairs with dimension i + hd/2, and the
// pair is rotated by the angle pos * theta^(-2i/hd), i in [0, hd/2):
//   out_i        = x_i cos - x_{i+hd/2} sin
//   out_{i+hd/2} = x_{i+hd/2} cos + x_i sin
// (the pairing of interleaved layouts, (2i, 2i+1), is a permutation of the head dims away, which
// a checkpoint converter would apply to the q and k weights).
//
// Positions are explicit GLOBAL token positions, int64 [T]: a sequence-parallel rank holding
// segment r of length T passes r*T .. r*T+T-1, and ring attention's balanced layout passes the
// positions of its two chunks. The angles are computed in float64 and then cast to x's dtype, and
// each entry depends only on its own position, so every layout gets bit-identical tables for the
// same positions (NOTE [Rotary tables]).
//
// A rotation is linear and orthogonal, so the backward is the rotation by the negative angle
// (the transpose) and needs nothing saved besides the positions.
#include <ATen/ATen.h>

namespace loom::nn {

constexpr double kRotaryTheta = 10000.0;

// cos and sin of every (position, pair) angle, [T, hd/2] in the dtype and device given. Build it
// once for a micro-batch's positions and apply it to q and k of every layer.
struct RotaryTable {
  at::Tensor cos, sin;

  static RotaryTable build(const at::Tensor& positions, int64_t head_dim, double theta,
                           const at::TensorOptions& options);
};

at::Tensor apply_rotary(const at::Tensor& x, const RotaryTable& table);
at::Tensor apply_rotary_backward(const at::Tensor& dy, const RotaryTable& table);

// The same, building the table for x's dtype and device.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& positions, double theta = kRotaryTheta);
at::Tensor apply_rotary_backward(const at::Tensor& dy, const at::Tensor& positions, double theta = kRotaryTheta);

}  // namespace loom::nn
