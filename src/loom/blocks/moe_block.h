#pragma once
// NOTE [Mixture-of-experts block]: the pre-norm sub-block y = x + sum_j w_j E_{e_j}(h) + S(h),
// h = norm(x), in place of a decoder block's MLP on the blocks model.moe_every names:
//   router   z = h R^T, R [E, d_model], kept and applied in float32 at least (a bf16 run's gate
//            is not rounded), then the routing of NOTE [Expert routing]: top k of E, weights
//            renormalised over the k, a capacity per expert (or dropless);
//   experts  E SwiGLU MLPs of hidden width H, stored as two stacked parameters, gate_up
//            [E, 2H, d_model] and down [E, d_model, H]; each runs once on its contiguous
//            segment of the dispatched tokens (one product per expert, none for an expert that
//            got no tokens);
//   shared   S, an always-on SwiGLU MLP of width shared x H (the shared experts, as one), if any.
// The auxiliary balance loss (NOTE [Expert balance]) of each micro-batch, times
// model.moe_aux_loss_coef, joins the training loss with the micro-batch's weight (loss_scale x
// its tokens: the mean over the step's micro-batches), so its gradient enters the router in
// backward_input; the step's loss the head reports does not include it.
// Backward: the combine's transpose gives each expert's output gradient and the weights'; each
// expert's SwiGLU backward; the router's through the renormalisation and the scores
// (router_backward); dh sums the dispatched rows' gradients (unpermute), the router's and the
// shared MLP's. The weight gradients (backward_weight) are one product per expert and the
// router's.
// With an expert group `ep` of more than one rank (NOTE [Expert parallelism]) this rank holds
// E / ep of the experts; the routed rows travel to them and back (parallel/expert_exchange.h).
// Under sequence parallelism (`sp`) the micro-batch's routing is agreed over the sp group (NOTE
// [Experts over sequence parallelism]).
// NOTE [Experts over tensor parallelism]: inside the tp region every tp rank holds every token of
// the region (under tp_sequence too: the skeleton gathers h) and the experts whole (E / ep of
// them); each routes all tokens alike and runs the experts on its share, tokens [r T / tp,
// (r + 1) T / tp), so its output, its dh and its experts' gradients are summands over tp, which
// the region and the tp sum of partial gradients add up. The router stays whole and replicated:
// its logits' gradient dz of each share is summed over tp (one [T, E] all-reduce) before its
// weight gradient, while each rank's dh takes its own share's. Shared experts are tensor-parallel
// linears as the dense MLP's. A capacity and the balance loss see the whole micro-batch, so
// nothing depends on tp.
#include <optional>
#include <utility>

#include "loom/blocks/pre_norm_block.h"
#include "loom/nn/moe_routing.h"
#include "loom/parallel/expert_exchange.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/parallel/tensor_parallel_linear.h"

namespace loom::blocks {

struct MoeState;  // what a micro-batch keeps from forward to backward (moe_block.cpp)

struct MoeShape {
  int64_t block = 0;  // its decoder block's index, which names it in the step's measures
  int64_t d_model = 0;
  int64_t hidden = 0;  // each expert's SwiGLU width H
  int64_t shared = 0;  // shared experts: an always-on MLP of width shared x hidden (0: none)
  nn::RouterOptions router;
  double aux_coef = 0;  // the auxiliary balance loss's coefficient (0: none)
  MoeBalance balance = MoeBalance::Aux;  // NOTE [Expert balance]
  double bias_rate = 0;                  // the bias's step under MoeBalance::Bias
  NormKind norm = NormKind::Rms;
  double residual_std = 0.02;  // down's initialisation
};

// What routing did, for a layer's measures and its bias balance: assignments per expert (kept, and
// chosen before drops), those dropped, and the balance loss (without its coefficient; summed in
// take_trained_load only), over `microbatches` micro-batches.
struct MoeLoad {
  std::vector<int64_t> counts, chosen;
  int64_t dropped = 0;
  double aux_loss = 0;
  int64_t microbatches = 0;
};

class MoeBlock final : public PreNormBlock {
 public:
  // `prefix` names the parameters, e.g. "blocks.1.moe": ".router.weight", ".experts.gate_up.weight",
  // ".experts.down.weight", ".shared.gate_up.weight", ".shared.down.weight".
  MoeBlock(const std::string& prefix, const MoeShape& shape, dist::Communicator& tp, parallel::TpOptions options = {},
           dist::Communicator* ep = nullptr, parallel::SpOptions sp = {});

  std::vector<nn::Param*> params() override;
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override;
  int64_t block() const { return shape_.block; }
  int64_t experts() const { return shape_.router.experts; }
  // The routing of the latest forward (a measure, not part of the step's math).
  const MoeLoad& last_load() const { return last_load_; }
  // The routing of the micro-batches trained since the last call (counted once each, in
  // backward_input: a recomputed forward or a validation pass adds nothing); starts afresh.
  MoeLoad take_trained_load();
  // NOTE [Expert balance]: under MoeBalance::Bias, moves the choice's bias by a step's loads
  // `chosen` (every rank's micro-batches summed); nothing otherwise.
  void balance(const std::vector<int64_t>& chosen);
  std::vector<nn::Buffer> buffers() override;

  nn::Param router;   // [E, d_model]
  nn::Param gate_up;  // [E, 2H, d_model] (this rank holds E / ep of them)
  nn::Param down;     // [E, d_model, H]
  std::optional<parallel::ColumnParallelLinear> shared_up;  // d_model -> [gate | up] of 2 x shared x H
  std::optional<parallel::RowParallelLinear> shared_down;   // shared x H -> d_model

 private:
  PreNormState& emplace_state(nn::Saved& saved) const override;
  at::Tensor forward_piece(const at::Tensor& h, const Piece& piece, PreNormState& s) override;
  at::Tensor decode_piece(const at::Tensor& h, int64_t position, nn::DecodeCache& cache) override;
  at::Tensor backward_piece(const at::Tensor& dy, const Piece& piece, PreNormState& s) override;
  void finish_backward(PreNormState& s) const override;
  void weight_gradients(PreNormState& s) override;
  void add_trained(const nn::Routing& r, double aux_loss);

  // The experts' outputs for this rank's dispatched rows [n, d] (`rows` in expert-major order):
  // here, or on the expert group's ranks and back. Fills u, a and (with a group) the rows the
  // local experts took, when `s` is given.
  at::Tensor apply_experts(const at::Tensor& rows, const nn::Routing& r, MoeState* s);
  bool expert_parallel() const { return ep_ != nullptr && ep_->size() > 1; }
  // The tokens [first, last) of `tokens` this tp rank runs the experts on.
  std::pair<int64_t, int64_t> token_share(int64_t tokens) const;
  // The routing of h [B, S, d_model] (this rank's chunks of B sequences), agreed over the sp group
  // when `spread`.
  nn::Routing route(const at::Tensor& h, const nn::RouterOptions& options, bool spread) const;

  MoeShape shape_;
  dist::Communicator* ep_;
  parallel::SpOptions sp_;
  at::Tensor bias_;  // [E] float64 on the host, under MoeBalance::Bias (NOTE [Expert balance])
  std::string bias_name_;
  MoeLoad last_load_, trained_load_;
};

}  // namespace loom::blocks
