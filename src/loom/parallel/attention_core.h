#pragma once
// NOTE [Attention cores]: causal attention over the tokens this rank holds, behind one interface
// with one implementation per sequence-parallel mode (NOTE [Sequence parallelism]):
//   local      no sequence parallelism: the kernel (NOTE [Attention kernels]) on the whole sequence
//   allgather  k and v of every earlier segment in one fused all-gather (again in backward), their
//              gradients back in one fused reduce-scatter; q_offset places the local queries
//   ring       k/v blocks rotate around the sp ring, overlapped with compute, partial results
//              merged by log-sum-exp; rank r holds chunks r and 2 sp - 1 - r
//   ulysses    one all-to-all to heads/sp heads of the whole sequence, one back (each way)
// A block calls forward and backward and never branches on the mode; make_attention_core picks
// the implementation once, from SpOptions.
//
// Grouped-query attention is the core's business: it takes k and v with Hkv heads (H a multiple of
// Hkv, query head h reading kv head h / (H / Hkv), nn/grouped_heads.h) and expands them right
// before the kernel, reducing their gradients right after it. Whatever travels between ranks is
// therefore the Hkv heads, not the expanded H (a factor H / Hkv fewer bytes in every mode), and
// ulysses splits the q heads and the kv heads over sp each in their own groups, so rank j's query
// heads still read rank j's kv heads.
//
// Shapes: q [B, H, T, hd]; k, v [B, Hkv, T, hd]; T is this rank's tokens (parallel::sequence_chunks
// order). Communication runs on the sp group only, in the calls documented per mode above.
#include <memory>

#include "loom/nn/attention.h"
#include "loom/parallel/sequence_parallel.h"

namespace loom::parallel {

// What a core keeps from forward for its backward, batch-first (a block cut into tp_overlap
// pieces keeps one per piece). Ulysses keeps them in the heads layout it computed in.
struct AttentionSaved {
  at::Tensor q, k, v;  // the kernel's inputs; k and v not expanded
  at::Tensor lse;      // [B, H, T]: log-sum-exp of each query's scores
  at::Tensor out;      // ulysses: the output in the heads layout (the others use the caller's)

  void for_each_tensor(const nn::TensorVisitor& visit);
};

struct AttentionInputGrads {
  at::Tensor dq;      // [B, H, T, hd]
  at::Tensor dk, dv;  // [B, Hkv, T, hd]
};

class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  // -> out [B, H, T, hd]; fills `saved`.
  virtual at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             AttentionSaved& saved) = 0;
  // dout [B, H, T, hd]; `out` is forward's output (any view: the caller keeps it anyway for the
  // output projection's weight gradient, so the core need not).
  virtual AttentionInputGrads backward(const at::Tensor& dout, const at::Tensor& out, const AttentionSaved& saved) = 0;
  // Whether `saved.out` holds a copy of the output: bytes the layer's cost must count.
  virtual bool keeps_output() const { return false; }
  // The ranks a sequence is split over: the causal pairs of the whole sequence are shared by them
  // (a rank's queries see the earlier segments' keys too), for the layer's cost.
  virtual int64_t sequence_ranks() const { return 1; }
  // The sp collectives of one forward and one backward for q of [batch, heads, tokens, head_dim]
  // and k, v of kv_heads (nn::CommUse; none without sequence parallelism).
  virtual std::vector<nn::CommUse> comm(int64_t batch, int64_t heads, int64_t kv_heads, int64_t tokens,
                                        int64_t head_dim, int64_t dtype_bytes) const {
    (void)batch, (void)heads, (void)kv_heads, (void)tokens, (void)head_dim, (void)dtype_bytes;
    return {};
  }
};

// The core of `sp`'s mode (local when sp is inactive), computing with `kernel`.
std::unique_ptr<AttentionCore> make_attention_core(const SpOptions& sp, const nn::AttentionKernel& kernel);

}  // namespace loom::parallel
