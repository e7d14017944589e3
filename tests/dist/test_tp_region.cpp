// parallel::TpRegion and its helpers with the world as the tp group (tp = 1, 2, 4), against local
// computations on the full tensors: the entry (identity, or an all-gather along the sequence
// under tp_sequence), the exit (an all-reduce, or a reduce-scatter along the sequence), the
// tp_overlap batch pieces and their reassembly, at awkward sizes. Values are small integers in
// float64, so every sum is exact and comparisons are for equality. Every check is non-fatal and
// comes after the collectives of its test, so no rank leaves a test early and strands the others.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "loom/parallel/tp_region.h"
#include "world.h"

namespace loom::parallel {
namespace {

using test::world;

// The same integers in [-11, 11] on every rank.
at::Tensor values(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return ((at::arange(n, at::kDouble) * 7).fmod(23) - 11).reshape(shape);
}

// Exact equality; on failure the shapes, or how many elements differ and the largest difference.
::testing::AssertionResult same(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << fmt::format("shape [{}], expected [{}]", fmt::join(got.sizes(), ", "),
                                                        fmt::join(want.sizes(), ", "));
  if (got.numel() == 0) return ::testing::AssertionSuccess();
  const at::Tensor g = got.reshape({-1}), w = want.reshape({-1}), diff = (g - w).abs();
  const int64_t worst = diff.argmax().item<int64_t>(), wrong = diff.ne(0).sum().item<int64_t>();
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << fmt::format(
             "{} of {} elements differ; the largest at flat index {} of shape [{}]: got {}, expected {}", wrong,
             g.numel(), worst, fmt::join(want.sizes(), ", "), g[worst].item<double>(), w[worst].item<double>());
}

// Rank r's partial sum leaving a region: (r + 1) h + r. Over n ranks: n(n+1)/2 h + n(n-1)/2.
at::Tensor partial(const at::Tensor& h, int64_t r) { return h * static_cast<double>(r + 1) + static_cast<double>(r); }
at::Tensor summed(const at::Tensor& h, int64_t n) {
  return h * static_cast<double>(n * (n + 1) / 2) + static_cast<double>(n * (n - 1) / 2);
}

struct Case {
  int64_t batch, pieces, tokens;  // tokens per rank: the sequence is tokens x tp
  std::vector<int64_t> rest;      // dims after the sequence
  bool sequence;                  // tp_sequence: the outside is sharded along the sequence
};

// For gtest's failure lines, which would otherwise print the case's bytes.
void PrintTo(const Case& c, std::ostream* out) {
  *out << fmt::format("batch {}, {} pieces, {} tokens per rank, rest [{}], {}", c.batch, c.pieces, c.tokens,
                      fmt::join(c.rest, ", "), c.sequence ? "sequence-sharded" : "replicated");
}

std::string name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return fmt::format("b{}_pieces{}_t{}_rest{}_{}", c.batch, c.pieces, c.tokens,
                     c.rest.empty() ? "none" : fmt::format("{}", fmt::join(c.rest, "x")),
                     c.sequence ? "seq" : "replicated");
}

class TpRegionSizes : public ::testing::TestWithParam<Case> {
 protected:
  // [batch, tokens x tp, rest...], the same on every rank, and this rank's tokens of a tensor.
  at::Tensor full() const {
    const Case& c = GetParam();
    std::vector<int64_t> shape = {c.batch, c.tokens * world().size()};
    shape.insert(shape.end(), c.rest.begin(), c.rest.end());
    return values(shape);
  }
  at::Tensor mine(const at::Tensor& t) const {
    return t.narrow(1, world().rank() * GetParam().tokens, GetParam().tokens).contiguous();
  }
};

// The way attention and MLP use a region under tp_overlap: every piece entered up front, then per
// piece the full-sequence input is taken, a partial output computed and left; finish joins the
// sums. Each entered piece is the full tensor's rows, and the result is the sum over tp (this
// rank's tokens of it under tp_sequence).
TEST_P(TpRegionSizes, RegionMatchesTheFullTensor) {
  const Case& c = GetParam();
  const int64_t n = world().size(), r = world().rank();
  const at::Tensor x = full();
  TpRegion region(world(), c.sequence);
  region.enter_chunks(c.sequence ? mine(x) : x, c.pieces);
  for (int64_t k = 0; k < c.pieces; ++k) {
    const auto [first, rows] = chunk_rows(c.batch, c.pieces, k);
    const at::Tensor h = region.next_entered();
    EXPECT_TRUE(same(h, x.narrow(0, first, rows))) << "entered piece " << k;
    region.leave(partial(h, r));
  }
  const at::Tensor out = region.finish();
  EXPECT_TRUE(same(out, c.sequence ? mine(summed(x, n)) : summed(x, n))) << "the region's output";
}

// The blocking helpers and a gather in flight, on their own.
TEST_P(TpRegionSizes, SequenceHelpersMatchTheFullTensor) {
  const int64_t n = world().size(), r = world().rank();
  const at::Tensor x = full();
  const at::Tensor gathered = gather_sequence(world(), mine(x));
  PendingSequenceGather pending(world(), mine(x));
  const at::Tensor waited = pending.wait();
  const at::Tensor scattered = reduce_scatter_sequence(world(), partial(x, r));
  EXPECT_TRUE(same(gathered, x)) << "gather_sequence";
  EXPECT_TRUE(same(waited, x)) << "PendingSequenceGather";
  EXPECT_TRUE(same(scattered, mine(summed(x, n)))) << "reduce_scatter_sequence";
}

// Sizes of one (the gather's view path at batch 1), primes, one row per piece, no dims after the
// sequence, several, an empty batch; each replicated and sequence-sharded.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool sequence : {false, true}) {
    out.push_back({1, 1, 1, {1}, sequence});
    out.push_back({3, 1, 5, {7}, sequence});
    out.push_back({3, 3, 2, {3}, sequence});
    out.push_back({6, 2, 3, {}, sequence});
    out.push_back({4, 2, 1, {2, 3}, sequence});
    out.push_back({0, 1, 2, {3}, sequence});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Sizes, TpRegionSizes, ::testing::ValuesIn(cases()), name);

// tp_overlap's pieces are equal row ranges covering the batch, refused where they would not be
// equal; store_chunk puts pieces back together along the dim they were cut from, and with one
// piece keeps the tensor itself (no copy).
TEST(TpRegionPieces, CutIntoEqualRowRangesAndReassembled) {
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(chunk_rows(12, 4, k), (std::pair<int64_t, int64_t>{3 * k, 3}));
  EXPECT_THROW(chunk_rows(10, 4, 0), Error);
  const at::Tensor x = values({6, 5, 2});
  for (int64_t dim : {0, 1}) {
    const int64_t pieces = x.size(dim);
    at::Tensor whole;
    for (int64_t k = pieces - 1; k >= 0; --k) store_chunk(whole, x.narrow(dim, k, 1), dim, k, pieces);  // any order
    EXPECT_TRUE(same(whole, x)) << "reassembled along dim " << dim;
  }
  at::Tensor whole;
  store_chunk(whole, x, 0, 0, 1);
  EXPECT_TRUE(whole.is_same(x)) << "one piece is kept as it is";
}

// Taking from a region nothing entered is an error on every rank alike (no communication yet).
TEST(TpRegionPieces, NothingEnteredIsAnError) {
  TpRegion region(world(), true);
  EXPECT_THROW(region.next_entered(), Error);
}

// Only sequence-partial gradients (NOTE [Parameter placements]: a gradient Partial over tp) are summed over tp, and only for the layer
// named; a layer without any, or past the last, is nothing to do.
TEST(TpRegionPieces, SequenceGradReducerSumsOnlyPartialGradients) {
  const int64_t n = world().size(), r = world().rank();
  nn::Param norm{.name = "norm.gain", .placements = {AxisPlacement::summed("tp")}}, dense{.name = "dense.w"};
  norm.grad = values({5}) + static_cast<double>(r);  // rank r's tokens' share
  dense.grad = values({2, 3}) + static_cast<double>(r);
  SequenceGradReducer reducer({{&dense, &norm}, {&dense}}, world());
  reducer.layer_done(1);
  reducer.layer_done(7);
  reducer.layer_done(0);
  EXPECT_TRUE(same(norm.grad, values({5}) * static_cast<double>(n) + static_cast<double>(n * (n - 1) / 2)));
  EXPECT_TRUE(same(dense.grad, values({2, 3}) + static_cast<double>(r))) << "a replicated gradient is left alone";
}

}  // namespace
}  // namespace loom::parallel
