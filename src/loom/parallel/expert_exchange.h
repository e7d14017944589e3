#pragma once
// NOTE [Expert parallelism]: parallel.ep splits a block's E experts over groups of ep consecutive
// dp ranks: rank r of a group holds experts [r E/ep, (r + 1) E/ep) (their stacked weights placed
// Shard(0) over "ep": NOTE [Parameter placements]). Each rank routes its own micro-batch's tokens
// exactly as the serial block does (NOTE [Expert routing]); the exchange then
//   1. sends each rank the number of rows it will get for each of its experts (an all-to-all of
//      the counts: every rank knows every size before a row moves, so an expert without tokens
//      is an empty block in every collective, never a missing one);
//   2. dispatches the rows (all-to-all-v; this rank's rows are expert-major, so the rows for one
//      rank are contiguous), and reorders what arrives from source-major to expert-major, so each
//      local expert runs one product over its rows from every rank of the group;
//   3. combines: the reverse reorder and all-to-all-v, each result back on the rank and in the
//      place its token was dispatched from.
// Backward sends the output gradients along the same way as the rows and the input gradients back
// along the combine's. An expert's weight gradient sums its rows from the whole group; the dp x sp
// ranks that hold the same experts (same place in their groups) then sum it again, as the dense
// path sums every other gradient over all of dp x sp ("edp": replicas/replica_optimizer.h). Under
// sequence parallelism the groups are carved from dp at each sp coordinate: an exchange moves the
// rows of sequence chunks, routed as NOTE [Experts over sequence parallelism] says.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::parallel {

class ExpertExchange {
 public:
  // Collective over `ep`: `counts` [E] are this rank's rows per expert (expert-major). E must be a
  // multiple of ep's size.
  ExpertExchange(dist::Communicator& ep, const std::vector<int64_t>& counts);

  // Collective: this rank's rows [n, d] (expert-major over all E) -> the rows of this rank's
  // experts from every rank of the group, [m, d], expert-major (local_counts' segments).
  at::Tensor dispatch(const at::Tensor& rows) const;
  // Collective, the transpose: [m, d] in dispatch's order -> [n, d] back in this rank's order.
  at::Tensor combine(const at::Tensor& rows) const;
  // Rows per local expert, summed over the group's ranks.
  const std::vector<int64_t>& local_counts() const { return local_counts_; }

 private:
  at::Tensor exchange(const at::Tensor& rows, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                      int64_t out_rows) const;

  dist::Communicator& ep_;
  std::vector<int64_t> send_rows_, recv_rows_;  // per rank of the group
  std::vector<int64_t> local_counts_;
  at::Tensor order_;  // received (source-major) row of each expert-major row
  int64_t sent_ = 0, received_ = 0;
};

}  // namespace loom::parallel
