#pragma once
// Causal scaled-dot-product attention computed in tiles with an online softmax, so the
// (seq x seq) score matrix is never materialised: memory is O(seq * tile) beyond Q, K, V and the
// output. Backward recomputes each score tile from Q, K and the saved log-sum-exp.
//
// Shapes: q [B, H, Tq, hd]; k, v [B, H, Tk, hd]. Query i (0-based within q) may attend key j iff
// j <= i + q_offset, so q_offset > 0 lets a rank that holds a later segment of the sequence attend
// keys gathered from earlier segments (sequence parallelism).
#include <ATen/ATen.h>

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

// Multiply-add FLOPs of the forward for the causal (visible) part: QK^T and PV.
double causal_attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim);
// Bytes the forward's score tiles move through memory (the causal half of seq x seq per head):
// what bounds the kernel on a device whose matmuls are fast (NOTE [Cluster cost model]).
double causal_attention_score_bytes(int64_t batch, int64_t heads, int64_t seq, int64_t dtype_bytes);

}  // namespace loom::nn
