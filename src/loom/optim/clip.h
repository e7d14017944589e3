#pragma once
// Global gradient-norm clipping: if ||g|| over all params exceeds max_norm, every gradient is
// scaled by max_norm / (||g|| + 1e-6). Returns the norm before clipping. max_norm <= 0 only measures.
//
// With tensor parallelism a rank holds shards of some parameters (Param::shard.dim >= 0) and
// full copies of the rest: the shards' squared norms are summed over `tp` (one 8-byte
// all-reduce), the replicated ones counted once. Every tp rank gets the same norm. With pipeline
// parallelism each stage holds different parameters: the total is summed over `pp` as well.
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
// Squared gradient norms of the replicated and the tp-sharded parameters, in that order.
std::pair<double, double> grad_norm_squares(const std::vector<nn::Param*>& params);

}  // namespace loom::optim
