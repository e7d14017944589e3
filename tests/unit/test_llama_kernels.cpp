// The kernels of a Llama-style model (RMSNorm, rotary embeddings, SwiGLU, grouped kv heads): each
// forward and explicit backward against libtorch autograd on the same math written with torch
// ops, in float64 (relative error <= 1e-9) and float32; and the properties sequence parallelism
// relies on (a segment's rotary is the slice of the whole sequence's, scores depend only on
// position differences).
#include <cmath>

#include "loom/core/error.h"
#include "loom/nn/attention.h"
#include "loom/nn/grouped_heads.h"
#include "loom/nn/rms_norm.h"
#include "loom/nn/rotary.h"
#include "loom/nn/swiglu.h"
#include "unit/layer_check.h"

// A namespace of the file's own: its shape constants share names with test_layers.cpp's, and a
// unity build compiles both in one translation unit.
namespace loom::test::llama_kernels {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16, kModel = 24, kHeads = 6, kKvHeads = 2, kHeadDim = 8, kTile = 4;
constexpr double kTheta = 10000.0;

at::Tensor positions(std::initializer_list<std::pair<int64_t, int64_t>> ranges) {
  std::vector<at::Tensor> parts;
  for (auto [begin, end] : ranges) parts.push_back(at::arange(begin, end, at::TensorOptions().dtype(at::kLong)));
  return at::cat(parts);
}

// Rotary written independently with torch ops: full-width cos / sin over [freqs | freqs] and the
// rotate-half as a concatenation, angles in float64.
torch::Tensor rotary_reference(const torch::Tensor& x, const at::Tensor& pos) {
  const int64_t hd = x.size(-1);
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  auto inv_freq = 1.0 / torch::pow(kTheta, torch::arange(0, hd, 2, f64) / static_cast<double>(hd));
  auto freqs = torch::outer(pos.to(torch::kDouble), inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
  auto rotated_half = torch::cat({-x.narrow(-1, hd / 2, hd / 2), x.narrow(-1, 0, hd / 2)}, -1);
  return x * cos + rotated_half * sin;
}

class LlamaKernels : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { torch::manual_seed(17); }
  at::ScalarType dtype() const { return GetParam(); }
  double tol() const { return tolerance(dtype()); }
  at::Tensor randn(at::IntArrayRef shape) const { return at::randn(shape, at::TensorOptions().dtype(dtype())); }

  // apply_rotary and its backward against autograd through rotary_reference.
  void check_rotary(const at::Tensor& pos) {
    const at::Tensor x = randn({kBatch, kHeads, pos.size(0), kHeadDim}), dy = randn(x.sizes());
    const at::Tensor y = nn::apply_rotary(x, pos, kTheta), dx = nn::apply_rotary_backward(dy, pos, kTheta);
    auto x_ref = x.clone().requires_grad_(true);
    auto y_ref = rotary_reference(x_ref, pos);
    y_ref.backward(dy);
    EXPECT_TENSOR_NEAR(y, y_ref.detach(), tol());
    EXPECT_TENSOR_NEAR(dx, x_ref.grad(), tol());
  }
};

TEST_P(LlamaKernels, RmsNormMatchesAutograd) {
  nn::RmsNorm norm("blocks.0.norm", kModel);
  ASSERT_EQ(norm.params().size(), 1u);
  nn::initialise(norm.gain, 7, dtype());
  // A random gain (not its init of one), so that a missing gain term cannot hide.
  norm.gain.value = randn({kModel}) * 0.5 + 1.0;
  const at::Tensor x = randn({kBatch, kSeq, kModel}) * 3.0, dy = randn({kBatch, kSeq, kModel});
  const auto out = norm.forward(x);
  const auto grads = norm.backward(dy, x, out.rstd);
  norm.accumulate(grads);
  norm.accumulate(grads);  // two micro-batches: the gradient adds up

  auto x_ref = x.clone().requires_grad_(true), gain_ref = norm.gain.value.clone().requires_grad_(true);
  auto y_ref = x_ref * torch::rsqrt(x_ref.square().mean(-1, true) + 1e-5) * gain_ref;
  y_ref.backward(dy);
  EXPECT_EQ(out.y.scalar_type(), dtype());
  EXPECT_EQ(out.rstd.scalar_type(), dtype()) << "statistics stay in the input's dtype";
  EXPECT_TENSOR_NEAR(out.y, y_ref.detach(), tol());
  EXPECT_TENSOR_NEAR(grads.dx, x_ref.grad(), tol());
  EXPECT_TENSOR_NEAR(grads.dgain, gain_ref.grad(), tol());
  EXPECT_TENSOR_NEAR(norm.gain.grad, 2 * gain_ref.grad(), tol());
}

TEST(RmsNorm, GainStartsAtOneAndIsTpPartialOnlyWhenSequenceSharded) {
  nn::RmsNorm plain("n", kModel), sharded("s", kModel, /*sequence_sharded=*/true);
  nn::initialise(plain.gain, 1, at::kFloat);
  EXPECT_TRUE(at::equal(plain.gain.value, at::ones({kModel})));
  EXPECT_EQ(plain.gain.name, "n.weight");
  EXPECT_FALSE(plain.gain.grad_on("tp").is_partial());
  EXPECT_TRUE(sharded.gain.grad_on("tp").is_partial());
  EXPECT_FALSE(plain.gain.weight_decay) << "norm gains are not decayed";
}

TEST_P(LlamaKernels, RotaryMatchesAutogradWithOffsetPositions) { check_rotary(positions({{5, 5 + kSeq}})); }

TEST_P(LlamaKernels, RotaryMatchesAutogradWithRingChunkPositions) { check_rotary(positions({{0, 4}, {12, 16}})); }

TEST_P(LlamaKernels, RotaryMatchesAutogradAtLargePositions) { check_rotary(positions({{100000, 100000 + kSeq}})); }

TEST_P(LlamaKernels, RotaryBackwardIsTheInverseRotation) {
  const at::Tensor pos = positions({{3, 3 + kSeq}}), x = randn({kBatch, kHeads, kSeq, kHeadDim});
  const at::Tensor round_trip = nn::apply_rotary_backward(nn::apply_rotary(x, pos), pos);
  EXPECT_TENSOR_NEAR(round_trip, x, tol());
}

// What sequence parallelism relies on: rotating a rank's tokens with their global positions gives
// exactly (bit for bit) the slice of the whole sequence's result, for contiguous segments and for
// the ring's balanced layout (rank r of sp holds chunks r and 2 sp - 1 - r of 2 sp).
TEST_P(LlamaKernels, RotaryOfASegmentIsTheSliceOfTheWholeSequence) {
  const int64_t sp = 4, segment = kSeq / sp, chunk = segment / 2;
  const at::Tensor x = randn({kBatch, kHeads, kSeq, kHeadDim});
  const at::Tensor whole = nn::apply_rotary(x, positions({{0, kSeq}}));
  const at::Tensor whole_back = nn::apply_rotary_backward(x, positions({{0, kSeq}}));
  for (int64_t r = 0; r < sp; ++r) {
    SCOPED_TRACE("segment " + std::to_string(r));
    const at::Tensor pos = positions({{r * segment, (r + 1) * segment}});
    const at::Tensor local = x.narrow(2, r * segment, segment);
    EXPECT_TRUE(at::equal(nn::apply_rotary(local, pos), whole.narrow(2, r * segment, segment)));
    EXPECT_TRUE(at::equal(nn::apply_rotary_backward(local, pos), whole_back.narrow(2, r * segment, segment)));
    const int64_t late = 2 * sp - 1 - r;  // the ring's second chunk of rank r
    const at::Tensor ring_pos = positions({{r * chunk, (r + 1) * chunk}, {late * chunk, (late + 1) * chunk}});
    const at::Tensor ring_x = at::cat({x.narrow(2, r * chunk, chunk), x.narrow(2, late * chunk, chunk)}, 2);
    const at::Tensor ring_want = at::cat({whole.narrow(2, r * chunk, chunk), whole.narrow(2, late * chunk, chunk)}, 2);
    EXPECT_TRUE(at::equal(nn::apply_rotary(ring_x, ring_pos), ring_want));
  }
}

// The relative-position property: with the same content at every position, q_m . k_n after
// rotary depends only on m - n, so the score matrix is Toeplitz and shifting every position by the
// same amount leaves it unchanged, while the scores do change with m - n.
TEST_P(LlamaKernels, RotaryScoresDependOnlyOnPositionDifference) {
  const at::Tensor q = randn({1, 1, 1, kHeadDim}).expand({1, 1, kSeq, kHeadDim});
  const at::Tensor k = randn({1, 1, 1, kHeadDim}).expand({1, 1, kSeq, kHeadDim});
  auto scores = [&](int64_t first) {
    const at::Tensor pos = positions({{first, first + kSeq}});
    return at::matmul(nn::apply_rotary(q, pos), nn::apply_rotary(k, pos).transpose(2, 3))[0][0];
  };
  const at::Tensor s = scores(0);
  EXPECT_TENSOR_NEAR(s.narrow(0, 1, kSeq - 1).narrow(1, 1, kSeq - 1), s.narrow(0, 0, kSeq - 1).narrow(1, 0, kSeq - 1),
                     tol());
  EXPECT_TENSOR_NEAR(scores(7), s, tol());
  EXPECT_TENSOR_NEAR(scores(1000), s, 10 * tol());  // float32 tables at large angles round a little more
  // ... and they are not all alike: the scores along a row (m fixed, n varying) must differ.
  EXPECT_GT(relative_error(s[0].narrow(0, 1, kSeq - 1), s[0].narrow(0, 0, kSeq - 1)), 0.05);
}

TEST_P(LlamaKernels, RotaryTablesOfTheSamePositionsAreBitIdentical) {
  const auto options = at::TensorOptions().dtype(dtype());
  const auto whole = nn::RotaryTable::build(positions({{0, 64}}), kHeadDim, kTheta, options);
  const auto some = nn::RotaryTable::build(positions({{5, 8}, {40, 47}}), kHeadDim, kTheta, options);
  const at::Tensor rows = positions({{5, 8}, {40, 47}});
  EXPECT_TRUE(at::equal(some.cos, whole.cos.index_select(0, rows)));
  EXPECT_TRUE(at::equal(some.sin, whole.sin.index_select(0, rows)));
  EXPECT_EQ(some.cos.sizes(), (at::IntArrayRef{10, kHeadDim / 2}));
  EXPECT_EQ(some.cos.scalar_type(), dtype());
}

TEST_P(LlamaKernels, SwiGluMatchesAutograd) {
  const int64_t hidden = 20;
  const at::Tensor gate_up = randn({kBatch, kSeq, 2 * hidden}) * 2.0, dy = randn({kBatch, kSeq, hidden});
  const at::Tensor y = nn::swiglu_forward(gate_up), dgate_up = nn::swiglu_backward(dy, gate_up);
  auto ref_in = gate_up.clone().requires_grad_(true);
  auto y_ref = torch::silu(ref_in.narrow(-1, 0, hidden)) * ref_in.narrow(-1, hidden, hidden);
  y_ref.backward(dy);
  EXPECT_TENSOR_NEAR(y, y_ref.detach(), tol());
  EXPECT_TENSOR_NEAR(dgate_up, ref_in.grad(), tol());
}

TEST(SwiGlu, HiddenFollowsTheLlamaRule) {
  EXPECT_EQ(nn::swiglu_hidden(4096, 4, 256), 11008);  // Llama 2 7B
  EXPECT_EQ(nn::swiglu_hidden(5120, 4, 256), 13824);  // Llama 2 13B
  EXPECT_EQ(nn::swiglu_hidden(64, 4, 32), 192);       // 2/3 * 256 = 170.7 -> 192
  EXPECT_EQ(nn::swiglu_hidden(24, 4, 8), 64);         // exactly 64 already
  EXPECT_EQ(nn::swiglu_hidden(24, 4, 1), 64);
  // The two-thirds step truncates before rounding up: 2 * 4 * 5 / 3 = 13.3 -> 13, a multiple of 13.
  EXPECT_EQ(nn::swiglu_hidden(5, 4, 13), 13);
  EXPECT_THROW(nn::swiglu_hidden(64, 4, 0), Error);
}

TEST_P(LlamaKernels, GroupedHeadsExpandConsecutivelyAndReduceIsItsBackward) {
  const int64_t groups = kHeads / kKvHeads;
  const at::Tensor kv = randn({kBatch, kKvHeads, kSeq, kHeadDim}), dy = randn({kBatch, kHeads, kSeq, kHeadDim});
  const at::Tensor expanded = nn::expand_kv_heads(kv, groups);
  ASSERT_EQ(expanded.sizes(), (at::IntArrayRef{kBatch, kHeads, kSeq, kHeadDim}));
  for (int64_t h = 0; h < kHeads; ++h) EXPECT_TRUE(at::equal(expanded.select(1, h), kv.select(1, h / groups)));
  auto kv_ref = kv.clone().requires_grad_(true);
  auto expanded_ref = torch::repeat_interleave(kv_ref, groups, /*dim=*/1);
  expanded_ref.backward(dy);
  EXPECT_TRUE(at::equal(expanded, expanded_ref.detach()));
  EXPECT_TENSOR_NEAR(nn::reduce_kv_heads(dy, groups), kv_ref.grad(), tol());
  EXPECT_TRUE(at::equal(nn::expand_kv_heads(kv, 1), kv));
  EXPECT_TRUE(at::equal(nn::reduce_kv_heads(dy, 1), dy));
  EXPECT_THROW(nn::reduce_kv_heads(dy, 4), Error);  // 6 heads are not groups of 4
}

// The kernels composed as a Llama attention core on a sequence-parallel rank's segment: rotary q
// and k at global positions, k and v shared by groups of query heads, the tiled causal kernel
// with q_offset, and each backward in reverse order, against autograd through the whole.
TEST_P(LlamaKernels, GroupedRotaryAttentionCoreMatchesAutograd) {
  const int64_t groups = kHeads / kKvHeads, offset = 6, tq = kSeq - offset;
  const at::Tensor q = randn({kBatch, kHeads, tq, kHeadDim}), k = randn({kBatch, kKvHeads, kSeq, kHeadDim}),
                   v = randn({kBatch, kKvHeads, kSeq, kHeadDim}), dout = randn({kBatch, kHeads, tq, kHeadDim});
  const at::Tensor q_pos = positions({{offset, kSeq}}), k_pos = positions({{0, kSeq}});
  const at::Tensor qr = nn::apply_rotary(q, q_pos), kr = nn::expand_kv_heads(nn::apply_rotary(k, k_pos), groups);
  const at::Tensor ve = nn::expand_kv_heads(v, groups);
  const auto fwd = nn::causal_attention_forward(qr, kr, ve, kTile, offset);
  const auto g = nn::causal_attention_backward(dout, qr, kr, ve, fwd.out, fwd.lse, kTile, offset);
  const at::Tensor dq = nn::apply_rotary_backward(g.dq, q_pos);
  const at::Tensor dk = nn::apply_rotary_backward(nn::reduce_kv_heads(g.dk, groups), k_pos);
  const at::Tensor dv = nn::reduce_kv_heads(g.dv, groups);

  auto q_ref = q.clone().requires_grad_(true), k_ref = k.clone().requires_grad_(true),
       v_ref = v.clone().requires_grad_(true);
  auto keys = torch::repeat_interleave(rotary_reference(k_ref, k_pos), groups, 1);
  auto values = torch::repeat_interleave(v_ref, groups, 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  auto scores = torch::matmul(rotary_reference(q_ref, q_pos), keys.transpose(2, 3)) * scale;
  auto future = torch::arange(kSeq).unsqueeze(0) > (torch::arange(tq).unsqueeze(1) + offset);
  auto out = torch::matmul(scores.masked_fill(future, -INFINITY).softmax(-1), values);
  out.backward(dout);
  EXPECT_TENSOR_NEAR(fwd.out, out.detach(), tol());
  EXPECT_TENSOR_NEAR(dq, q_ref.grad(), tol());
  EXPECT_TENSOR_NEAR(dk, k_ref.grad(), tol());
  EXPECT_TENSOR_NEAR(dv, v_ref.grad(), tol());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlamaKernels, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace loom::test::llama_kernels
