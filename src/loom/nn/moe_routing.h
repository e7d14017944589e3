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

// One micro-batch's routing of T tokens.
struct Routing {
  at::Tensor scores;   // [T, E], float32 or float64
  at::Tensor expert;   // [T, k] int64, by descending biased score
  at::Tensor weight;   // [T, k] in the scores' type, renormalised over the k (dropped ones included)
  at::Tensor kept;     // [T, k] bool
  at::Tensor order;    // [n] int64: the kept assignments t * k + j, expert-major
  std::vector<int64_t> chosen;  // [E] assignments chosen per expert, before drops
  std::vector<int64_t> counts;  // [E] kept assignments per expert: the segments of `order`
  int64_t dropped = 0;

  int64_t tokens() const { return expert.size(0); }
  int64_t top_k() const { return expert.size(1); }
};

// Routes the tokens of `logits` [T, E] (scores in float32, or float64 for float64 logits).
// `bias` [E] steers the choice only (undefined: none).
Routing route(const at::Tensor& logits, const at::Tensor& bias, const RouterOptions& options);

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

// NOTE [Expert balance]: the auxiliary loss E * sum_i f_i P_i of one micro-batch (without its
// coefficient) and its gradient with respect to the scores, [T, E].
struct AuxLoss {
  double value = 0;
  at::Tensor dscores;
};
AuxLoss aux_loss(const Routing& r);

}  // namespace loom::nn
