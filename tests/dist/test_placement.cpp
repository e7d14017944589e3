// NOTE [Placements]: each placement's piece, gather and reduce-scatter against the full tensor, at
// sizes the group does not divide (every world size from 1 to 8 runs it), along every dimension.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "loom/dist/tensor_placement.h"
#include "world.h"

namespace loom::test {
namespace {


// A tensor every rank makes alike: distinct values, so a misplaced element shows.
at::Tensor full_tensor(std::vector<int64_t> shape, double scale = 1.0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kDouble).mul_(0.37).sin_().mul_(scale) + 2.0).view(shape);
}

// The shapes: 97 rows (a vocabulary no group divides), fewer rows than ranks, and a 3-d one.
std::vector<std::vector<int64_t>> shapes() { return {{97, 5}, {3, 7}, {1}, {5, 2, 11}}; }

TEST(Placements, PiecesOfAShardGatherToTheWholeTensor) {
  const int n = world().size(), r = world().rank();
  for (const auto& shape : shapes()) {
    const at::Tensor full = full_tensor(shape);
    for (int dim = 0; dim < full.dim(); ++dim) {
      const Placement p = Placement::shard(dim);
      const at::Tensor mine = dist::piece(full, p, r, n);
      const int64_t length = piece_length(full.size(dim), n), real = real_length(full.size(dim), n, r);
      SCOPED_TRACE(fmt::format("shape [{}], {}, rank {} of {}", fmt::join(shape, ", "), p.text(), r, n));
      ASSERT_EQ(mine.size(dim), length) << "every piece has the same shape";
      EXPECT_TRUE(at::equal(mine.narrow(dim, 0, real), full.narrow(dim, std::min(length * r, full.size(dim)), real)));
      EXPECT_EQ(mine.narrow(dim, real, length - real).abs().sum().item<double>(), 0.0) << "padding is zero";
      EXPECT_TRUE(at::equal(dist::gather(mine, p, full.sizes(), world()), full));
    }
  }
}

TEST(Placements, ReduceScatterGivesEachRankItsPieceOfTheSum) {
  const int n = world().size(), r = world().rank();
  for (const auto& shape : shapes()) {
    // Rank k's summand is the full tensor times (k + 1): the sum is the full tensor times n(n+1)/2.
    const at::Tensor summand = full_tensor(shape, r + 1.0);
    const at::Tensor sum = full_tensor(shape, n * (n + 1) / 2.0) + 2.0 * (n - 1);
    for (int dim = 0; dim < summand.dim(); ++dim) {
      const Placement p = Placement::shard(dim);
      SCOPED_TRACE(fmt::format("shape [{}], {}, rank {} of {}", fmt::join(shape, ", "), p.text(), r, n));
      const at::Tensor mine = dist::reduce_scatter(summand, p, world());
      const at::Tensor want = dist::piece(sum, p, r, n);
      ASSERT_EQ(mine.sizes(), want.sizes());
      EXPECT_TRUE(at::allclose(mine, want, 1e-13, 1e-13)) << "max |difference| " << (mine - want).abs().max().item<double>();
    }
  }
}

TEST(Placements, ReplicateAndPartialRoundTrip) {
  const int n = world().size(), r = world().rank();
  const at::Tensor full = full_tensor({97, 3});
  // Replicate: the piece is the whole; gathering changes nothing; reduce-scatter is an all-reduce.
  const at::Tensor replicated = dist::piece(full, Placement::replicate(), r, n);
  EXPECT_TRUE(at::equal(replicated, full));
  EXPECT_TRUE(at::equal(dist::gather(replicated, Placement::replicate(), full.sizes(), world()), full));
  EXPECT_TRUE(at::allclose(dist::reduce_scatter(full, Placement::replicate(), world()), full * n, 1e-13, 1e-13));
  // Partial: the pieces sum to the whole; gathering sums them; reduce-scatter keeps the summand.
  const at::Tensor partial = dist::piece(full, Placement::partial(), r, n);
  EXPECT_EQ(partial.abs().sum().item<double>() == 0.0, r != 0);
  EXPECT_TRUE(at::equal(dist::gather(partial, Placement::partial(), full.sizes(), world()), full));
  EXPECT_TRUE(at::equal(dist::reduce_scatter(partial, Placement::partial(), world()), partial));
}

TEST(Placements, TextNamesThePlacement) {
  EXPECT_EQ(Placement::shard(1).text(), "shard(1)");
  EXPECT_EQ(Placement::replicate().text(), "replicate");
  EXPECT_EQ(Placement::partial().text(), "partial");
}

}  // namespace
}  // namespace loom::test
