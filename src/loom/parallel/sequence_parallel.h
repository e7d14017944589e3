#pragma once
// NOTE [Sequence parallelism] (parallel.sp, LSS Transformer): the mesh's sp axis splits every
// sequence into sp contiguous segments, rank r holding tokens [r Ts, (r+1) Ts) with Ts = T / sp.
// The embedding (positions offset to the segment), norms, MLPs and the head work on the local
// segment only; causal attention needs the keys and values of the earlier segments:
//   sp_mode = "allgather": each rank computes q, k, v of its segment; k and v travel together in
//     one fused all-gather per layer in forward (and again in backward, rather than keeping every
//     segment's keys between the two); the local queries attend the keys of segments 0..r with
//     the tiled kernel (q_offset = r Ts, never the full score matrix); the partial dk and dv of
//     those segments travel back in one fused reduce-scatter.
//   sp_mode = "ring": k and v blocks rotate around the sp ring with non-blocking send / recv, each
//     block's attention computed while the next travels, partial results merged with the online
//     softmax (log-sum-exp); backward rotates the blocks again with their gradient accumulators,
//     which arrive back at their owners after a full turn. Causal work is balanced: the sequence
//     is cut into 2 sp chunks and rank r holds chunks r and 2 sp - 1 - r. K/V memory stays
//     O(seq / sp).
//   sp_mode = "ulysses": an all-to-all turns the segment's q, k, v of every head into the whole
//     sequence's q, k, v of heads/sp heads; attention runs on full sequences for those heads; a
//     second all-to-all turns the output back (and the same two, reversed, in backward). Needs
//     the heads of a tp rank (and its kv heads, under grouped-query attention) divisible by sp.
// Each mode is an attention core (NOTE [Attention cores], parallel/attention_core.h); this file
// holds the segment layout and the collectives they share.
// Weight gradients are partial per segment and per data-parallel rank: they are summed in one
// bucketed all-reduce over the combined dp x sp group ("double gradient averaging" in one pass;
// the loss scale 1/(global tokens) makes a sum the mean).
#include <string>
#include <vector>

#include "loom/core/options.h"
#include "loom/dist/communicator.h"
#include "loom/nn/layer.h"

namespace loom::parallel {

using loom::SpMode;  // parallel.sp_mode (core/options.h)

struct SpOptions {
  dist::Communicator* sp = nullptr;  // the sequence-parallel group; null or one rank: off
  SpMode mode = SpMode::AllGather;
  bool active() const { return sp != nullptr && sp->size() > 1; }
};

// The chunks of the sequence this rank holds, in order, of equal length: {0} without sequence
// parallelism, {r} for segment r, {r, 2 sp - 1 - r} for the balanced ring.
std::vector<int64_t> sequence_chunks(const SpOptions& sp);

// The global positions of a rank's `tokens` tokens when they are the equal chunks `chunks` of the
// sequence, in order (sequence_chunks): int64 [tokens].
at::Tensor chunk_positions(const std::vector<int64_t>& chunks, int64_t tokens);

// A micro-batch of whole sequences -> this rank's chunks of each (tokens and targets, in
// sequence_chunks order): what the rank's layers see under sequence parallelism.
nn::MicroBatch local_segments(const nn::MicroBatch& mb, const SpOptions& sp);

// kv [2, B, H, Ts, hd] of this segment -> [2, B, H, (r+1) Ts, hd]: the keys and values of
// segments 0..r (those this rank's causal queries can see), in one all-gather.
at::Tensor gather_visible_kv(dist::Communicator& sp, const at::Tensor& kv);

// dkv [2, B, H, (r+1) Ts, hd], this rank's partial gradients of segments 0..r -> [2, B, H, Ts, hd],
// their sum over the ranks for this rank's segment, in one reduce-scatter.
at::Tensor reduce_scatter_visible_kv(dist::Communicator& sp, const at::Tensor& dkv);

// Ulysses: each x [B, Hi, Ts, hd] of this segment and every head -> [B, Hi/sp, T, hd], the whole
// sequence of this rank's group of its heads; all of them in one all-to-all (the tensors may have
// different head counts: q and grouped k, v).
std::vector<at::Tensor> segments_to_heads(dist::Communicator& sp, const std::vector<at::Tensor>& xs);
// The inverse: each [B, Hi/sp, T, hd] -> [B, Hi, Ts, hd]; one all-to-all.
std::vector<at::Tensor> heads_to_segments(dist::Communicator& sp, const std::vector<at::Tensor>& xs);

}  // namespace loom::parallel
