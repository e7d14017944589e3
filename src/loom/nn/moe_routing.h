#pragma once
// NOTE [Expert routing]: a mixture-of-experts layer sends each of T tokens to k of E experts.
//   scores   s = softmax(z) or sigmoid(z) of the gate's logits z [T, E], in float32 at least
//            (float64 stays float64; bf16 activations do not round the gate);
//   choice   the k experts of the largest s + b (b: a per-expert bias that only steers the choice,
//            zero unless the layer balances by bias), ties to the lower expert index, so the
//            choice is the same on every rank and in every layout;
//   weights  w[t, j] = s[t, e_j] / sum_l s[t, e_l], the chosen scores renormalised over the k;
//   capacity with a capacity factor c > 0 an expert takes at most C = ceil(c T k / E) of the
//            micro-batch's assignments, first choices before second ones, in token order within
//            each (so which ones drop is fixed by the tokens, not by the layout); a dropped
//            assignment adds nothing and is counted. c = 0 is dropless.
// NOTE [Experts over sequence parallelism]: under parallel.sp a micro-batch's tokens lie on the sp
// ranks, each holding chunks of every sequence (TokenSpread). What is the micro-batch's, not the
// token's, is summed over them in one all-reduce: its token count T, each expert's choices (the
// balance loss's f) and normalised scores (its P), and the assignments of each (slot, cell,
// expert), a cell being one sequence's chunk. An assignment's place in its expert's queue is then
// the count of assignments before it in the micro-batch's order (slot, then cell, then token):
// every earlier slot's and earlier cell's from the sum, its own cell's (here) from a stable sort.
// So the choices, drops and balance loss are the serial run's, whatever the sequence's split.
// Dispatch lays the kept assignments out expert-major (expert 0's tokens first, each expert's in
// assignment order): `permute` gathers their rows, the experts run on contiguous segments, and
// `combine` scatters each result back to its token, weighted, summing a token's k results in
// slot order (a fixed order: the sum is the same bits wherever it runs). Both are pure index
// moves, so permute followed by the inverse scatter returns the input exactly, and their
// backwards are the reverse moves.
//
// The auxiliary load-balancing loss (NOTE [Expert balance]) is a * E * sum_i f_i P_i with f_i the
// fraction of the micro-batch's assignments chosen for expert i (before drops) and P_i the mean
// over tokens of p[t, i] = s[t, i] / sum_e s[t, e]; f is a count, so only P carries a gradient.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "loom/core/options.h"

namespace loom::nn {

using MoeScore = loom::MoeScore;  // core/options.h, with its names

struct RouterOptions {
  int64_t experts = 0;
  int64_t top_k = 1;
  MoeScore score = MoeScore::Softmax;
  double capacity_factor = 0;  // 0: dropless
};

// Assignments an expert takes from `tokens` tokens: C above, or `tokens` when dropless.
int64_t expert_capacity(int64_t tokens, const RouterOptions& options);

// Where a rank's tokens lie in their micro-batch (NOTE [Experts over sequence parallelism]); the
// default: all of it is here.
struct TokenSpread {
  at::Tensor cell;  // [T] int64, each local token's cell, nondecreasing; undefined: all in cell 0
  int64_t cells = 1;
  std::function<void(at::Tensor&)> sum;  // in place, over the ranks holding the micro-batch; empty: none
};

// One micro-batch's routing of T tokens (this rank's; `batch_*` the whole micro-batch's).
struct Routing {
  at::Tensor scores;   // [T, E], float32 or float64
  at::Tensor expert;   // [T, k] int64, by descending biased score
  at::Tensor weight;   // [T, k] in the scores' type, renormalised over the k (dropped ones included)
  at::Tensor kept;     // [T, k] bool
  at::Tensor order;    // [n] int64: the kept assignments t * k + j, expert-major
  std::vector<int64_t> chosen;  // [E] assignments chosen per expert, before drops
  std::vector<int64_t> counts;  // [E] kept assignments per expert: the segments of `order`
  int64_t dropped = 0;
  int64_t batch_tokens = 0;
  at::Tensor batch_chosen;      // [E] the micro-batch's choices per expert, in the scores' type
  at::Tensor batch_score_sum;   // [E] its normalised scores p = s / sum_e s, summed over tokens

  int64_t tokens() const { return expert.size(0); }
  int64_t top_k() const { return expert.size(1); }
};

// Routes the tokens of `logits` [T, E] (scores in float32, or float64 for float64 logits).
// `bias` [E] steers the choice only (undefined: none). Collective over `spread.sum`'s ranks.
Routing route(const at::Tensor& logits, const at::Tensor& bias, const RouterOptions& options,
              const TokenSpread& spread = {});

// NOTE [Experts over tensor parallelism]: the routing of tokens [first, last) only, for the tp
// rank that runs them (every tp rank routes all T tokens alike and runs its share): kept, order,
// the counts, choices and drops of those tokens; the scores, choices and micro-batch sums of all.
Routing restrict_tokens(const Routing& r, int64_t first, int64_t last);

// Rows of x [T, d] for each kept assignment, expert-major: [n, d].
at::Tensor permute(const at::Tensor& x, const Routing& r);
// The transpose of permute: each row of `rows` [n, d] added into its token's row of a [T, d]
// result, a token's k rows summed in slot order.
at::Tensor unpermute(const at::Tensor& rows, const Routing& r);
// sum_j w[t, j] y_j for the experts' outputs `rows` [n, d] (permute's order): [T, d] in rows'
// type.
at::Tensor combine(const at::Tensor& rows, const Routing& r);
// combine's backward for its output gradient dy [T, d]: the rows' gradient [n, d] and the
// weights' [T, k] (the scores' type; zero for dropped assignments).
struct CombineGrads {
  at::Tensor rows, weight;
};
CombineGrads combine_backward(const at::Tensor& dy, const at::Tensor& rows, const Routing& r);

// The gate logits' gradient [T, E] (the scores' type) from the weights' gradient `dweight` [T, k] and the
// scores' own `dscores` [T, E] (the auxiliary loss's; undefined: none).
at::Tensor router_backward(const at::Tensor& dweight, const at::Tensor& dscores, const Routing& r,
                           const RouterOptions& options);

// NOTE [Expert balance]: two ways to even out the experts' loads (model.moe_balance).
//   aux   the auxiliary loss E * sum_i f_i P_i of each micro-batch (without its coefficient),
//         whose gradient with respect to the scores, [T, E], pulls the router towards balance;
//   bias  also a bias b [E] on the choice only (route's `bias`: it never weights an output, so it
//         has no gradient), moved after every step by the step's loads: b_i += rate x sign(mean_j
//         n_j - n_i), with n_i the assignments chosen for expert i (before drops) over the whole
//         global batch, every rank's micro-batches summed. The loads are integers and their sum
//         is exact, so b is the same bits in every layout; it is held in float64 and saved with the
//         checkpoint (auxiliary-loss-free balancing, DeepSeek-V3, arXiv:2412.19437, section 2.1.2).
struct AuxLoss {
  double value = 0;
  at::Tensor dscores;
};
AuxLoss aux_loss(const Routing& r);
// The bias update above, in place: `chosen` [E] the step's loads.
void update_balance_bias(at::Tensor& bias, const std::vector<int64_t>& chosen, double rate);

}  // namespace loom::nn
