#pragma once
// Global gradient-norm clipping: if ||g|| over all params exceeds max_norm, every gradient is
// scaled by max_norm / (||g|| + 1e-6). Returns the norm before clipping. max_norm <= 0 only measures.
//
// With tensor parallelism a rank holds shards of some parameters (placed Shard over "tp": NOTE
// [Parameter placements]) and full copies of the rest: the shards' squared norms are summed over `tp` (one 8-byte
// all-reduce), the replicated ones counted once. Every tp rank gets the same norm. With pipeline
// parallelism each stage holds different parameters: the total is summed over `pp` as well.
#include <utility>
#include <vector>

#include "loom/dist/communicator.h"
#include "loom/nn/param.h"

namespace loom::optim {

double global_grad_norm(const std::vector<nn::Param*>& params, dist::Communicator& tp, dist::Communicator* pp = nullptr);
// `extra`: squared norms [replicated, tp-sharded] of gradients held elsewhere (sparse tables),
// already summed over their replicas; the caller scales those by clip_factor of the result.
double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm, dist::Communicator& tp,
                      dist::Communicator* pp = nullptr, std::pair<double, double> extra = {0, 0});
// What clipping multiplies every gradient by: max_norm / (norm + 1e-6) above the limit, else 1.
double clip_factor(double norm, double max_norm);
// The global norm from this rank's squared norms [replicated, tp-sharded] (see above).
double combine_norm_squares(double replicated, double sharded, dist::Communicator& tp, dist::Communicator* pp);
// Squared gradient norms of the replicated and the tp-sharded parameters, in that order, each
// parameter's grad_norm_square added in the order of `params`. Refuses (loom::Error) a parameter
// sharded over "ep": its square would need a sum over the expert group, which only
// ReplicaOptimizer::clip_replicated does (NOTE [Expert parallelism]).
std::pair<double, double> grad_norm_squares(const std::vector<nn::Param*>& params);
// The global norm when the data-parallel group `owners` splits the gradients between its ranks
// (ZeRO's shards, each rank's `parts`): their squared norms summed over `owners` (one 16-byte
// all-reduce), then `extra` (see clip_grad_norm) added and the result combined over tp and pp.
double sharded_grad_norm(std::vector<nn::Param>& parts, dist::Communicator& owners, std::pair<double, double> extra,
                         dist::Communicator& tp, dist::Communicator* pp);

// NOTE [Table norms]
// An embedding table's squared gradient norm is one sum, the same whichever path the table takes
// (NOTE [Table paths]) and however its rows are partitioned (NOTE [Partition count]): each row's
// squares summed in double in column order, then the rows' sums in row order. Dense, a rank holds
// the whole summed gradient and adds every row (an untouched row adds 0.0, which changes no sum);
// on the sparse path each owner squares its touched rows and the replica group gathers them, so
// every rank adds the same numbers in the same order (SparseTable::push). ATen's float32 norm of
// the whole tensor would instead group the elements by the piece a rank holds (the table, or one
// owner's rows) and round each piece's norm to float32: the clipping factor, hence every weight,
// differed in the last bits between paths and partition counts. The replicated optimizer then
// adds the parameters' squares in model order, a table at its place whatever its path
// (ReplicaOptimizer::clip_replicated).
// Each row's sum of squares, double [rows], of a [rows, d] tensor; every row summed by one thread
// in column order, so the result does not depend on the thread count.
at::Tensor row_norm_squares(const at::Tensor& rows);
// The sum of the elements of a double tensor, in index order.
double sum_in_order(const at::Tensor& values);
// The squared norm of a parameter's gradient: an embedding table's (Param::embedding, two
// dimensions) by rows as above, any other's from ATen's norm.
double grad_norm_square(const nn::Param& param);

}  // namespace loom::optim
