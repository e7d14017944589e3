#pragma once
// NOTE [Tensor-parallel regions]. A tensor-parallel sub-block (attention, MLP) is a region: an
// activation enters it, every tp rank computes with its heads or hidden units, and partial sums
// of the output leave it. What crosses the two borders depends on `parallel.tp_sequence`:
//
//                         enter (forward x; backward dy)       leave (forward y; backward dx)
//   tp_sequence = false   identity: x is replicated            all-reduce of [b, T, d]
//   tp_sequence = true    all-gather along seq: [b, T/tp, d]   reduce-scatter along seq:
//                         on each rank -> [b, T, d]            [b, T, d] partial -> [b, T/tp, d]
//
// Under tp_sequence (Megatron-style sequence parallelism in the norm regions) the LayerNorms,
// residual adds and everything saved for them hold T/tp tokens per rank, so their activation
// memory shrinks by tp, and an all-gather plus a reduce-scatter move the same bytes as the
// all-reduce they replace (backward adds one all-gather per sub-block: the normed input again,
// for the weight gradient, rather than keeping the gathered copy). Rank r holds tokens [r T/tp, (r+1) T/tp). A sequence-sharded norm's
// gain and bias gradients cover only its tokens; SequenceGradReducer sums them over tp.
//
// NOTE [Sub-pipelined TP] (Merak, parallel.tp_overlap = k): a region cuts its micro-batch into
// k chunks along the batch dim. Every chunk's entry gather is started up front, and as soon as a
// chunk's partial output is computed its reduction starts, non-blocking, while the next chunk
// computes; pending operations are driven between chunks (MPI progresses only inside MPI
// calls). The sums are those of one collective over the whole tensor, chunk by chunk, so the
// model is unchanged.
#include <deque>
#include <vector>

#include "loom/core/error.h"
#include "loom/dist/communicator.h"
#include "loom/nn/param.h"

namespace loom::parallel {

// How the tensor-parallel sub-blocks communicate (parallel.tp_overlap, parallel.tp_sequence).
struct TpOptions {
  int64_t overlap = 1;    // chunks per micro-batch (NOTE [Sub-pipelined TP]); 1 = off
  bool sequence = false;  // sequence-sharded norm regions (NOTE [Tensor-parallel regions])
};

// [b, T/tp, ...] on each tp rank -> [b, T, ...] (a new tensor; blocking).
at::Tensor gather_sequence(dist::Communicator& tp, const at::Tensor& local);
// [b, T, ...] partial sums -> this rank's [b, T/tp, ...] of their sum over tp (blocking).
at::Tensor reduce_scatter_sequence(dist::Communicator& tp, const at::Tensor& partial);

// An all-gather along seq in flight; `wait` returns the full-sequence tensor.
class PendingSequenceGather {
 public:
  PendingSequenceGather(dist::Communicator& tp, const at::Tensor& local);
  bool test() { return work_->test(); }
  at::Tensor wait();

 private:
  dist::WorkPtr work_;
  at::Tensor blocks_;  // [tp, b, T/tp, ...]
};

class TpRegion {
 public:
  // `sequence`: the region's outside is sequence-sharded (tp_sequence); ignored on one rank.
  TpRegion(dist::Communicator& tp, bool sequence);

  // Starts bringing `outside` (one chunk of the input or of dy) to the full sequence.
  void enter(const at::Tensor& outside);
  // enter() for each of `chunks` equal batch chunks of `outside`, in order.
  void enter_chunks(const at::Tensor& outside, int64_t chunks);
  // The oldest entered tensor, waited for: [b, T, ...].
  at::Tensor next_entered();
  // Starts summing `partial` ([b, T, ...], left untouched until finish) over tp.
  void leave(at::Tensor partial);
  // Waits for every reduction; returns the left tensors' sums (this rank's tokens under
  // tp_sequence), joined along the batch dim.
  at::Tensor finish();

 private:
  void progress();
  dist::Communicator& tp_;
  bool sequence_;
  std::deque<at::Tensor> ready_;                 // entered without communication
  std::deque<PendingSequenceGather> gathers_;    // entered through an all-gather
  std::vector<dist::WorkPtr> reductions_;
  std::vector<at::Tensor> results_;
};

// The [begin, length) batch rows of chunk c when `batch` rows are cut into `chunks` equal parts;
// `chunks` must divide `batch` (the config check parallel.tp_overlap | train.micro_batch).
inline std::pair<int64_t, int64_t> chunk_rows(int64_t batch, int64_t chunks, int64_t c) {
  LOOM_CHECK(batch % chunks == 0, "[tp] a batch of {} rows does not cut into {} equal tp_overlap chunks", batch,
             chunks);
  const int64_t length = batch / chunks;
  return {c * length, length};
}

// Keeps chunk `part` (rows [first, first + part.size(dim)) of `dim`) of a tensor cut into
// `chunks`: with one chunk `whole` is `part` itself, else it is allocated on the first call and
// the part copied in.
void store_chunk(at::Tensor& whole, const at::Tensor& part, int64_t dim, int64_t first, int64_t chunks);

// Sums over tp the gradients of a layer's parameters whose gradient is Partial over tp (NOTE
// [Parameter placements]: tp_sequence's norms, the experts under tp), once per step, when the
// layer's gradients are otherwise final: before data parallelism reduces them.
class SequenceGradReducer {
 public:
  SequenceGradReducer(const std::vector<std::vector<nn::Param*>>& layer_params, dist::Communicator& tp);
  // One all-reduce of the layer's partial gradients packed together; nothing if it has none.
  void layer_done(size_t layer);

 private:
  dist::Communicator& tp_;
  std::vector<std::vector<nn::Param*>> partial_;  // per layer
};

}  // namespace loom::parallel
