#pragma once
// NOTE [Mixed precision]
// model.dtype = "bfloat16" trains float32 master weights with bfloat16 products:
// - Param::value, Param::grad, the AdamW moments and the step stay float32. Param::compute holds
//   the value rounded to bfloat16, made once per optimizer step (refresh_compute), and every
//   matrix product reads it (compute_value), so a weight is not cast again per micro-batch.
// - Activations flow between layers, are saved for backward and cross tp/sp/pp links in
//   bfloat16. Matrix products take bfloat16 operands, accumulate in float32 and round the result
//   to bfloat16 once, natively or widened to float32 as the rank's CPU makes fast (NOTE [bf16
//   products], nn/products.h, where every product lives).
// - What needs the range or the sums of float32 widens first (widen): LayerNorm and RMSNorm
//   statistics and their backward, the attention's softmax (running max, sum, accumulator, the
//   log-sum-exp), rotary's rotation, the loss and its softmax, and every accumulator that sums
//   several terms (attention's tile sums, gradient accumulation over micro-batches: a weight
//   gradient is a bfloat16 product added to the float32 Param::grad by add_product).
// - Gradients are reduced in float32 unless parallel.grad_dtype = "bfloat16" (GradientReducer).
// With float32 or float64 models every function here is the plain operation, so float64 runs stay
// bit-for-bit what they were (the layout-equivalence tests prove layouts in float64).
#include <ATen/ATen.h>

#include "loom/core/options.h"
#include "loom/nn/param.h"

namespace loom::nn {

// model.dtype's parameter (master) type and activation type: bfloat16 keeps float32 masters.
at::ScalarType master_type(DType dtype);
at::ScalarType activation_type(DType dtype);

// The type of statistics and accumulators for activations of type `t`: float32 for bfloat16,
// `t` itself otherwise.
at::ScalarType wide_type(at::ScalarType t);
// x in wide_type (x itself when it already is).
at::Tensor widen(const at::Tensor& x);
// x in `type` (x itself when it already is).
at::Tensor to_type(const at::Tensor& x, at::ScalarType type);

// The parameter as products read it: its compute copy when one is kept, else its value.
const at::Tensor& compute_value(const Param& p);
// Keeps Param::compute equal to value rounded to `activations` (after initialisation and each
// optimizer step); drops it when `activations` is value's own type. A table on the sparse path
// keeps none (its rows are fetched, and cast by the layer).
void refresh_compute(Param& p, at::ScalarType activations);

// acc.index_add_(dim, index, t), widening t to acc's type. (acc.add_(t) widens by itself.)
void index_add_into(const at::Tensor& acc, int64_t dim, const at::Tensor& index, const at::Tensor& t);
// The sum over dim 0 of a [rows, n] gradient, summed and returned in `type`.
at::Tensor sum_rows(const at::Tensor& t, at::ScalarType type);

}  // namespace loom::nn
