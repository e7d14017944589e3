// The tiled, online-softmax attention kernel: equal to the plain masked-softmax attention for
// any tile size and offset, and its memory grows linearly with the sequence.
#include <cmath>

#include "loom/memory/accounting_allocator.h"
#include "loom/nn/attention.h"
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

INSTANTIATE_TEST_SUITE_P(Shapes, TiledAttention,
                         ::testing::Values(Case{1, 1, 4, 0}, Case{16, 16, 4, 0}, Case{37, 37, 8, 0},
                                           Case{37, 37, 64, 0}, Case{29, 29, 1, 0}, Case{13, 31, 5, 18},
                                           Case{8, 24, 3, 16}));

TEST(TiledAttentionMemory, PeakGrowsLinearlyWithSequence) {
  memory::install_accounting_allocator();
  const int64_t heads = 2, hd = 16, tile = 64;
  auto peak_for = [&](int64_t seq) {
    auto opts = at::TensorOptions().dtype(at::kFloat);
    auto q = at::randn({1, heads, seq, hd}, opts), k = at::randn({1, heads, seq, hd}, opts),
         v = at::randn({1, heads, seq, hd}, opts);
    const int64_t before = memory::live_bytes();
    memory::reset_peak();
    auto fwd = nn::causal_attention_forward(q, k, v, tile);
    auto grads = nn::causal_attention_backward(fwd.out, q, k, v, fwd.out, fwd.lse, tile);
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

}  // namespace
}  // namespace loom::test
