#pragma once
// NOTE [Experts beside ZeRO]: the experts sharded over ep (NOTE [Expert parallelism]) keep one path
// whichever ZeRO stage the dense parameters take (parallel.zero = 0-3): whole on their ranks in
// one flat buffer, their gradients summed over the ranks that hold the same experts (edp, dp x
// sp) in buckets as the backward passes (a GradientReducer of their own), their squares summed
// over the expert group into the one global norm, clipped by the same factor, and stepped by an
// AdamW of their own. ZeRO's shards divide the dense parameters only: an expert group already
// divides the experts' weights, moments and gradients by ep, so the dense state is what ZeRO
// shrinks. Checkpoint pieces are the ep shards' boxes, as without ZeRO, so a resume may change
// zero and ep together.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/optim/adamw.h"
#include "loom/replicas/flat_params.h"
#include "loom/replicas/gradient_reducer.h"

namespace loom::replicas {

class ExpertOptimizer {
 public:
  // `model`'s parameters sharded over ep, initialised (or `initialise` makes them). `ep`: the
  // expert group; `replicas`: the ranks holding the same experts.
  ExpertOptimizer(models::Model& model, dist::Communicator& ep, dist::Communicator& replicas, double bucket_mb,
                  std::optional<at::ScalarType> wire, const optim::AdamWOptions& adamw,
                  const std::function<void(nn::Param&)>& initialise);
  // Whether `model` has a parameter sharded over ep (otherwise no ExpertOptimizer is made).
  static bool needed(models::Model& model);

  void zero_grad() { flat_.grads.zero_(); }
  void layer_done(size_t layer) { reducer_.layer_done(layer); }
  void finish() { reducer_.finish(); }  // the gradients summed over the replicas
  // Collective over ep: the squares of every expert gradient of the group, each counted once.
  double norm_square();
  void step(double lr, double clip_factor);
  optim::AdamW& adamw() { return *adamw_; }
  const optim::AdamW& adamw() const { return *adamw_; }
  const std::vector<nn::Param*>& params() const { return params_; }

 private:
  dist::Communicator& ep_;
  std::vector<nn::Param*> params_;
  FlatParams flat_;
  GradientReducer reducer_;
  std::unique_ptr<optim::AdamW> adamw_;
};

}  // namespace loom::replicas
