#pragma once
// Causal scaled-dot-product attention computed in tiles with an online softmax, so the
// (seq x seq) score matrix is never materialised: memory is O(seq * tile) beyond Q, K, V and the
// output. Backward recomputes each score tile from Q, K and the saved log-sum-exp.
//
// Shapes: q [B, H, Tq, hd]; k, v [B, H, Tk, hd]. Query i (0-based within q) may attend key j iff
// j <= i + q_offset, so q_offset > 0 lets a rank that holds a later segment of the sequence attend
// keys gathered from earlier segments (sequence parallelism).
#include <ATen/ATen.h>

#include "loom/core/options.h"

namespace loom::nn {

struct AttentionForward {
  at::Tensor out;  // [B, H, Tq, hd], in q's type (or its wide type: AttentionOut::Wide)
  at::Tensor lse;  // [B, H, Tq]: log-sum-exp of each query's scaled scores, in wide_type(q's type)
};

// The type of AttentionForward::out: q's, for a finished result; or wide_type(q's type), for a
// partial result over some of the keys that is merged with others before it is rounded once (the
// ring merges its blocks so: a bfloat16 partial rounded per block would add one rounding per block).
enum class AttentionOut { InputType, Wide };

struct AttentionGrads {
  at::Tensor packed;  // [3, B, H, T, hd] when Tq == Tk (dq, dk, dv are its slices), else undefined
  at::Tensor dq, dk, dv;
};

AttentionForward causal_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          int64_t tile, int64_t q_offset = 0,
                                          AttentionOut out_type = AttentionOut::InputType);

// `out` may be any view with the logical shape [B, H, Tq, hd].
AttentionGrads causal_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                         int64_t tile, int64_t q_offset = 0);

// NOTE [Attention kernels]: the same causal attention from two kernels, chosen by model.attn_kernel.
//   tiled  the functions above: any q_offset, and a wide output for partial results (the ring)
//   fused  libtorch's fused attention: on the CPU _scaled_dot_product_flash_attention_for_cpu and
//          its backward, blocked like the tiled one (O(seq) memory) but vectorised end to end, no
//          pass of its own per tile; on a GPU the memory-efficient CUDA kernel (scores stay on
//          chip), in float32 and bfloat16 with heads of a multiple of 8 (float64 takes the tiled
//          kernel there: the exact core). Only for a sequence's queries against its own keys
//          (q_offset 0, as many queries as keys) with a finished output
// "fused" runs the fused kernel where it applies and the tiled one elsewhere (a segment's queries
// against earlier keys under sp "allgather" or "ring", decoding after the prompt); "tiled" runs
// the tiled one everywhere. Both give the same log-sum-exp (natural log of the sum of exp of the
// scaled scores), so either backward can follow either forward. In float64 they agree to
// rounding (tests/unit/test_attention.cpp, and every layout-equivalence test mixes them: sp ring
// against the serial run); in bfloat16 both round only the products' operands (NOTE [Mixed
// precision]), the fused one in its own blocks.
// On the widened path (NOTE [bf16 products]) either kernel runs in float32 on the widened
// operands, its output and gradients rounded to bfloat16 once.
struct AttentionKernel {
  AttnKernel kind = AttnKernel::Fused;
  int64_t tile = 128;  // the tiled kernel's query/key tile
  Bf16Products products = Bf16Products::Native;
};

// Whether `kernel` runs the fused kernel on these operands.
bool runs_fused(const AttentionKernel& kernel, const at::Tensor& q, const at::Tensor& k, int64_t q_offset,
                AttentionOut out_type = AttentionOut::InputType);

// The attention of `kernel` (NOTE [Attention kernels]); arguments as causal_attention_forward's.
AttentionForward attention_forward(const AttentionKernel& kernel, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, int64_t q_offset = 0,
                                   AttentionOut out_type = AttentionOut::InputType);
AttentionGrads attention_backward(const AttentionKernel& kernel, const at::Tensor& dout, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                  const at::Tensor& lse, int64_t q_offset = 0);

// Multiply-add FLOPs of the forward for the causal (visible) part: QK^T and PV.
double causal_attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim);
// Bytes the forward's score tiles move through memory (the causal half of seq x seq per head):
// what bounds the kernel on a device whose matmuls are fast (NOTE [Cluster cost model]).
double causal_attention_score_bytes(int64_t batch, int64_t heads, int64_t seq, int64_t dtype_bytes);

}  // namespace loom::nn
