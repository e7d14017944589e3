// The attention kernels (NOTE [Attention kernels]): the tiled, online-softmax kernel equal to the
// plain masked-softmax attention for any tile size and offset, the fused one equal to it where it
// runs, the two interchangeable, and the memory of both growing linearly with the sequence.
#include <cmath>

#include "loom/memory/accounting_allocator.h"
#include "loom/nn/attention.h"
#include "loom/nn/precision.h"
#include "unit/layer_check.h"

namespace loom::test {
namespace {

// Plain attention where query i sees keys j <= i + offset.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  int64_t offset) {
  auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));
  auto rows = torch::arange(q.size(2)).unsqueeze(1) + offset;
  auto cols = torch::arange(k.size(2)).unsqueeze(0);
  return torch::matmul(scores.masked_fill(cols > rows, -INFINITY).softmax(-1), v);
}

struct Case {
  int64_t tq, tk, tile, offset;
};

class TiledAttention : public ::testing::TestWithParam<Case> {};

TEST_P(TiledAttention, ForwardAndBackwardMatchAutogradInFloat64) {
  const Case c = GetParam();
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto q = torch::randn({2, 3, c.tq, 8}, opts), k = torch::randn({2, 3, c.tk, 8}, opts),
       v = torch::randn({2, 3, c.tk, 8}, opts), dout = torch::randn({2, 3, c.tq, 8}, opts);
  auto fwd = nn::causal_attention_forward(q, k, v, c.tile, c.offset);
  auto grads = nn::causal_attention_backward(dout, q, k, v, fwd.out, fwd.lse, c.tile, c.offset);

  auto qr = q.clone().requires_grad_(true), kr = k.clone().requires_grad_(true), vr = v.clone().requires_grad_(true);
  auto out = reference_attention(qr, kr, vr, c.offset);
  out.backward(dout);
  EXPECT_TENSOR_NEAR(fwd.out, out.detach(), 1e-9);
  EXPECT_TENSOR_NEAR(grads.dq, qr.grad(), 1e-9);
  EXPECT_TENSOR_NEAR(grads.dk, kr.grad(), 1e-9);
  EXPECT_TENSOR_NEAR(grads.dv, vr.grad(), 1e-9);
}

// model.attn_kernel = "fused": the fused kernel where a sequence's queries meet its own keys (and
// runs_fused says so), the tiled one for the other cases; either way the plain attention.
TEST_P(TiledAttention, FusedChoiceMatchesAutogradInFloat64) {
  const Case c = GetParam();
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  // q, k, v as strided views of one packed projection, as the blocks hand them over.
  auto packed = torch::randn({2, c.tk, 3, 3, 8}, opts);
  auto q = packed.select(2, 0).narrow(1, c.tk - c.tq, c.tq).transpose(1, 2), k = packed.select(2, 1).transpose(1, 2),
       v = packed.select(2, 2).transpose(1, 2), dout = torch::randn({2, 3, c.tq, 8}, opts);
  const nn::AttentionKernel kernel{.kind = AttnKernel::Fused, .tile = c.tile};
  EXPECT_EQ(nn::runs_fused(kernel, q, k, c.offset), c.offset == 0 && c.tq == c.tk);
  auto fwd = nn::attention_forward(kernel, q, k, v, c.offset);
  // The output as the blocks keep it: a [B, T, H, hd] buffer seen as [B, H, T, hd].
  const torch::Tensor out = fwd.out.transpose(1, 2).contiguous().transpose(1, 2);
  auto grads = nn::attention_backward(kernel, dout, q, k, v, out, fwd.lse, c.offset);

  auto qr = q.detach().clone().requires_grad_(true), kr = k.detach().clone().requires_grad_(true),
       vr = v.detach().clone().requires_grad_(true);
  auto ref = reference_attention(qr, kr, vr, c.offset);
  ref.backward(dout);
  EXPECT_TENSOR_NEAR(fwd.out, ref.detach(), 1e-9);
  EXPECT_TENSOR_NEAR(grads.dq, qr.grad(), 1e-9);
  EXPECT_TENSOR_NEAR(grads.dk, kr.grad(), 1e-9);
  EXPECT_TENSOR_NEAR(grads.dv, vr.grad(), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TiledAttention,
                         ::testing::Values(Case{1, 1, 4, 0}, Case{16, 16, 4, 0}, Case{37, 37, 8, 0},
                                           Case{37, 37, 64, 0}, Case{29, 29, 1, 0}, Case{13, 31, 5, 18},
                                           Case{8, 24, 3, 16}));

// The two kernels give the same log-sum-exp, so either backward follows either forward; and in
// float32 and bfloat16 they agree to their rounding.
class KernelAgreement : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(KernelAgreement, FusedAgreesWithTiled) {
  const at::ScalarType type = GetParam();
  torch::manual_seed(7);
  const auto opts = at::TensorOptions().dtype(type);
  auto q = at::randn({2, 4, 200, 32}, opts), k = at::randn({2, 4, 200, 32}, opts), v = at::randn({2, 4, 200, 32}, opts),
       dout = at::randn({2, 4, 200, 32}, opts);
  const nn::AttentionKernel fused{.kind = AttnKernel::Fused, .tile = 64}, tiled{.kind = AttnKernel::Tiled, .tile = 64};
  ASSERT_TRUE(nn::runs_fused(fused, q, k, 0));
  ASSERT_FALSE(nn::runs_fused(tiled, q, k, 0));
  const nn::AttentionForward f = nn::attention_forward(fused, q, k, v), t = nn::attention_forward(tiled, q, k, v);
  // bfloat16 rounds the probabilities to its 8 bits before the value product, each kernel in its
  // own blocks: a few units in the last place of the output. The tiled kernel also rounds the
  // scores (a bfloat16 product) where the fused one keeps them float32: the log-sum-exp differs
  // within a unit of bfloat16 (2^-8). float32: near its own rounding.
  const bool narrow = type == at::kBFloat16;
  const double out_tol = narrow ? 2e-2 : 1e-5, lse_tol = narrow ? 4e-3 : 1e-5;
  EXPECT_EQ(f.out.scalar_type(), type);
  EXPECT_EQ(f.lse.scalar_type(), nn::wide_type(type));
  EXPECT_TENSOR_NEAR(f.out.to(at::kDouble), t.out.to(at::kDouble), out_tol);
  EXPECT_TENSOR_NEAR(f.lse.to(at::kDouble), t.lse.to(at::kDouble), lse_tol);
  const nn::AttentionGrads by_fused = nn::attention_backward(fused, dout, q, k, v, f.out, f.lse);
  const nn::AttentionGrads crossed = nn::attention_backward(tiled, dout, q, k, v, f.out, f.lse);
  const double grad_tol = narrow ? 6e-2 : 1e-4;
  for (auto [a, b] : {std::pair{by_fused.dq, crossed.dq}, {by_fused.dk, crossed.dk}, {by_fused.dv, crossed.dv}}) {
    EXPECT_EQ(a.scalar_type(), type);
    EXPECT_TENSOR_NEAR(a.to(at::kDouble), b.to(at::kDouble), grad_tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KernelAgreement, ::testing::Values(at::kFloat, at::kBFloat16));

class AttentionMemory : public ::testing::TestWithParam<AttnKernel> {};

TEST_P(AttentionMemory, PeakGrowsLinearlyWithSequence) {
  memory::install_accounting_allocator();
  const int64_t heads = 2, hd = 16;
  const nn::AttentionKernel kernel{.kind = GetParam(), .tile = 64};
  auto peak_for = [&](int64_t seq) {
    auto opts = at::TensorOptions().dtype(at::kFloat);
    auto q = at::randn({1, heads, seq, hd}, opts), k = at::randn({1, heads, seq, hd}, opts),
         v = at::randn({1, heads, seq, hd}, opts);
    const int64_t before = memory::live_bytes();
    memory::reset_peak();
    auto fwd = nn::attention_forward(kernel, q, k, v);
    auto grads = nn::attention_backward(kernel, fwd.out, q, k, v, fwd.out, fwd.lse);
    return memory::peak_bytes() - before;
  };
  const int64_t seq = 4096;
  const double peak = static_cast<double>(peak_for(seq));
  const double score_matrix = static_cast<double>(heads * seq * seq * 4);  // what plain attention holds
  EXPECT_LT(peak, score_matrix / 8) << "the kernel must not materialise (seq x seq) scores";
  // Doubling the sequence roughly doubles the peak (linear), far from the 4x of quadratic.
  const double ratio = static_cast<double>(peak_for(2 * seq)) / peak;
  EXPECT_LT(ratio, 2.5);
  EXPECT_GT(ratio, 1.5);
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionMemory, ::testing::Values(AttnKernel::Fused, AttnKernel::Tiled),
                         [](const auto& info) { return std::string(name_of(info.param)); });

}  // namespace
}  // namespace loom::test
