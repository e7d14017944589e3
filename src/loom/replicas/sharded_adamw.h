#pragma once
// ZeRO stage 1: AdamW whose moments are sharded over the data-parallel group. Each rank owns one
// equal, contiguous shard of the flat parameter buffer. A step reduce-scatters the flat gradient
// (sum), clips by the global norm (an all-reduce of the shards' squared norms), updates the
// owned shard and all-gathers the parameters. With a narrower `wire` type (parallel.grad_dtype)
// the gradient is rounded to it for the reduce-scatter and widened into the float32 shard.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "loom/dist/communicator.h"
#include "loom/optim/adamw.h"
#include "loom/replicas/flat_params.h"

namespace loom::replicas {

class ShardedAdamW {
 public:
  // `tp`: the tensor-parallel group, over which the norm of tp-sharded parameters is summed;
  // `pp`: the pipeline group, over which the stages' norms are summed.
  ShardedAdamW(FlatParams& flat, dist::Communicator& dp, dist::Communicator& tp, dist::Communicator& pp,
               optim::AdamWOptions options, std::optional<at::ScalarType> wire = std::nullopt);
  // Returns the global gradient norm before clipping (clip <= 0: no clipping). `extra`: squared
  // norms [replicated, tp-sharded] of gradients outside the flat buffer (sparse tables), already
  // summed over the dp group; the caller clips those with the same rule.
  // `before_update(norm)` runs once the norm is known and before any value changes; it may throw
  // (every rank sees the same norm, so all throw together).
  double step(double lr, double clip, std::pair<double, double> extra = {0, 0},
              const std::function<void(double)>& before_update = {});

  // The parts of parameters inside this rank's shard: each one's parameter and its first element
  // (in the parameter's row-major flattening); their moments are adamw()'s, in the same order.
  struct Part {
    nn::Param* param;
    int64_t begin;
  };
  const std::vector<Part>& parts() const { return parts_; }
  optim::AdamW& adamw() { return *adamw_; }
  const optim::AdamW& adamw() const { return *adamw_; }

 private:
  FlatParams& flat_;
  dist::Communicator& dp_;
  dist::Communicator& tp_;
  dist::Communicator& pp_;
  at::ScalarType wire_;  // the type the gradient is reduce-scattered in
  int64_t shard_offset_, shard_numel_;
  at::Tensor shard_grad_;
  std::vector<nn::Param> shard_params_;  // the parts of parameters inside the shard, as views
  std::vector<Part> parts_;              // whose parts they are
  std::unique_ptr<optim::AdamW> adamw_;
};

}  // namespace loom::replicas
