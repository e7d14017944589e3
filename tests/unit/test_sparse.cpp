// The sparse path in one process (a group of one): row partitions, lazy AdamW against its
// formula and against dense AdamW, the dense table update against dense AdamW row by row, lazy
// on a dense table against lazy on the sparse path, the partition-count fit, the DLRM layers
// against autograd (and their sparse path against their dense one), and the synthetic clicks.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/data/clicks.h"
#include "loom/dist/null_communicator.h"
#include "loom/blocks/dlrm_layers.h"
#include "loom/optim/adamw.h"
#include "loom/optim/clip.h"
#include "loom/parallel/sparse_table.h"
#include "loom/replicas/sparse_tables.h"
#include "unit/layer_check.h"

namespace loom::test {
namespace {

namespace F = torch::nn::functional;
const auto kDouble = at::TensorOptions().dtype(at::kDouble);
const auto kLong = at::TensorOptions().dtype(at::kLong);

TEST(SparsePartitions, TileTheRowsRoundRobinOverRanks) {
  const auto parts = parallel::partition_rows(10, 4, 3);
  ASSERT_EQ(parts.size(), 4u);
  int64_t next = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    EXPECT_EQ(parts[k].begin, next);
    EXPECT_GE(parts[k].end - parts[k].begin, 2);  // 10 rows in 4: sizes 2 or 3
    EXPECT_EQ(parts[k].owner, static_cast<int>(k % 3));
    next = parts[k].end;
  }
  EXPECT_EQ(next, 10);
  EXPECT_THROW(parallel::partition_rows(3, 4, 1), Error);
}

TEST(SparsePartitions, FitRecoversTheCostModelAndItsMinimum) {
  const parallel::PartitionCost truth{.a = 2.0, .b = 8.0, .c = 0.5};
  std::vector<int64_t> ps{1, 2, 4, 8, 16};
  std::vector<double> t;
  for (int64_t p : ps) t.push_back(truth.at(p));
  const parallel::PartitionCost fit = parallel::fit_partition_cost(ps, t);
  EXPECT_NEAR(fit.a, 2.0, 1e-9);
  EXPECT_NEAR(fit.b, 8.0, 1e-9);
  EXPECT_NEAR(fit.c, 0.5, 1e-9);
  EXPECT_EQ(parallel::best_partition_count(fit, 64), 4);  // minimum of b/P + c P at sqrt(b / c)
  EXPECT_EQ(parallel::best_partition_count({.a = 1, .b = 8, .c = 0}, 16), 16);  // no overhead: the most
}

// A table of `rows` x `width` in float64 with random values, on the sparse path of a group of one.
struct OneRankTable {
  dist::NullCommunicator alone;
  nn::Param param;
  std::unique_ptr<parallel::SparseTable> table;
  OneRankTable(int64_t rows, int64_t width, int64_t partitions, const optim::AdamWOptions& options,
               TableUpdate update = TableUpdate::Lazy) {
    param = nn::Param{.name = "t", .full_shape = {rows, width}, .init = nn::Init::Normal, .init_std = 1.0,
                      .weight_decay = true, .embedding = true};
    table = std::make_unique<parallel::SparseTable>(param, alone, partitions, options, update);
    table->initialise(3, at::kDouble);
  }
};

TEST(SparseTable, LazyAdamWUpdatesOnlyTouchedRowsByTheFormula) {
  const optim::AdamWOptions options{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  OneRankTable t(9, 3, 4, options);
  const at::Tensor initial = t.table->gather_full().clone();
  // Step 1 touches rows 1, 3 (twice) and 7; step 2 rows 3 and 5; rows 0, 2, 4, 6, 8 never.
  const std::vector<std::vector<int64_t>> steps{{3, 1, 3, 7}, {5, 3}};
  at::Tensor p = initial.clone(), m = at::zeros_like(p), v = at::zeros_like(p);
  torch::manual_seed(2);
  for (size_t s = 0; s < steps.size(); ++s) {
    const double lr = 0.01 * static_cast<double>(s + 1);
    const at::Tensor ids = at::tensor(steps[s], kLong);
    const at::Tensor grads = at::randn({ids.numel(), 3}, kDouble);
    t.table->pull(ids);
    EXPECT_TENSOR_NEAR(t.table->lookup(ids), p.index_select(0, ids), 1e-15);
    t.table->accumulate(ids, grads);
    t.table->push();
    EXPECT_EQ(t.table->touched_rows(), static_cast<int64_t>(std::set<int64_t>(steps[s].begin(), steps[s].end()).size()));
    t.table->step(lr);
    // The formula, row by row, for the rows this step touched (summed gradient of repeats).
    const at::Tensor g = at::zeros_like(p).index_add_(0, ids, grads);
    const double step = static_cast<double>(s + 1);
    for (int64_t r : std::set<int64_t>(steps[s].begin(), steps[s].end())) {
      m[r] = m[r] * 0.9 + g[r] * 0.1;
      v[r] = v[r] * 0.95 + g[r] * g[r] * 0.05;
      const at::Tensor denom = (v[r] / (1 - std::pow(0.95, step))).sqrt() + 1e-8;
      p[r] = p[r] * (1 - lr * 0.1) - lr / (1 - std::pow(0.9, step)) * m[r] / denom;
    }
  }
  const at::Tensor got = t.table->gather_full();
  EXPECT_TENSOR_NEAR(got, p, 1e-12);
  for (int64_t r : {0, 2, 4, 6, 8}) EXPECT_TRUE(got[r].equal(initial[r])) << "row " << r << " was never looked up";
}

TEST(SparseTable, RowsTouchedEveryStepTrainLikeDenseAdamW) {
  const optim::AdamWOptions options{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  OneRankTable t(6, 4, 3, options);
  nn::Param dense{.name = "t", .full_shape = {6, 4}, .weight_decay = true};
  dense.value = t.table->gather_full().clone();
  dense.grad = at::zeros_like(dense.value);
  optim::AdamW reference({&dense}, options);
  torch::manual_seed(4);
  for (int s = 0; s < 4; ++s) {
    const at::Tensor ids = at::cat({at::arange(6, kLong), at::randint(0, 6, {5}, kLong)});  // all, some twice
    const at::Tensor grads = at::randn({ids.numel(), 4}, kDouble);
    t.table->pull(ids);
    t.table->accumulate(ids, grads);
    t.table->push();
    t.table->step(1e-2);
    dense.grad.zero_().index_add_(0, ids, grads);
    reference.step(1e-2);
  }
  EXPECT_TENSOR_NEAR(t.table->gather_full(), dense.value, 1e-12);
}

// train.table_update = "dense" on the sparse path: the owner updates every row it owns, so rows
// no step looks up still decay and their moments follow a zero gradient: dense AdamW, row by row.
TEST(SparseTable, DenseUpdateMatchesDenseAdamWRowByRowUntouchedRowsIncluded) {
  const optim::AdamWOptions options{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  OneRankTable t(9, 3, 4, options, TableUpdate::Dense);
  nn::Param dense{.name = "t", .full_shape = {9, 3}, .weight_decay = true};
  dense.value = t.table->gather_full().clone();
  dense.grad = at::zeros_like(dense.value);
  const at::Tensor initial = dense.value.clone();
  optim::AdamW reference({&dense}, options);
  // Rows 0, 2, 4, 6, 8 are never looked up; row 5 only in the second step.
  const std::vector<std::vector<int64_t>> steps{{3, 1, 3, 7}, {5, 3}, {1, 7, 7}};
  torch::manual_seed(6);
  for (size_t s = 0; s < steps.size(); ++s) {
    const double lr = 0.01 * static_cast<double>(s + 1);
    const at::Tensor ids = at::tensor(steps[s], kLong), grads = at::randn({ids.numel(), 3}, kDouble);
    t.table->pull(ids);
    t.table->accumulate(ids, grads);
    t.table->push();
    t.table->step(lr);
    dense.grad.zero_().index_add_(0, ids, grads);
    reference.step(lr);
    const at::Tensor got = t.table->gather_full();
    for (int64_t r = 0; r < 9; ++r) {
      SCOPED_TRACE(fmt::format("step {} row {}", s, r));
      EXPECT_TENSOR_NEAR(got[r], dense.value[r], 1e-14);
    }
  }
  EXPECT_FALSE(dense.value[0].equal(initial[0])) << "an untouched row decays under dense AdamW";
}

// One layer holding one table, looking up the micro-batches' tokens as an embedding's pull_rows
// does: a model for the tables' own tests.
class LooksUpTokens final : public nn::Layer {
 public:
  // `fails`: pull_rows throws once it has looked up (a layer that fails mid-pull).
  explicit LooksUpTokens(nn::Param& table, bool fails = false) : table_(table), fails_(fails) {}
  std::string name() const override { return "looks_up"; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch&, nn::Saved&) override { return x; }
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved&) override { return dy; }
  void backward_weight(nn::Saved&) override {}
  std::vector<nn::Param*> params() override { return {&table_}; }
  void pull_rows(const std::vector<nn::MicroBatch>& microbatches) override {
    for (const nn::MicroBatch& mb : microbatches)
      if (table_.sparse != nullptr) table_.sparse->pull(mb.tokens);
    if (fails_) throw Error("a planted failure in pull_rows");
  }
  nn::Cost cost(int64_t, int64_t, int64_t) const override { return {}; }

 private:
  nn::Param& table_;
  bool fails_;
};

// train.table_update = "lazy" on a dense table (parallel.sparse = "off"): SparseTables notes the
// rows the layers look up and AdamW, asked through its RowFilter, updates only those, as the
// sparse path's owner does; a piece of the table (as ZeRO-1 cuts the flat buffer) gets the
// elements of its own range.
TEST(SparseTables, LazyDenseTableMatchesLazySparsePath) {
  const optim::AdamWOptions options{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  OneRankTable sparse(9, 3, 2, options, TableUpdate::Lazy);
  nn::Param dense = sparse.param;
  dense.value = sparse.table->gather_full().clone();
  dense.grad = at::zeros_like(dense.value);
  dist::NullCommunicator alone;
  models::Model model;
  model.chain.push_back(std::make_unique<LooksUpTokens>(dense));
  replicas::SparseTables tables(model, alone, alone,
                                {.mode = SparseMode::Off, .update = TableUpdate::Lazy, .adamw = options,
                                 .dtype = at::kDouble});
  ASSERT_NE(tables.row_filter(), nullptr);
  EXPECT_EQ(tables.size(), 0u);
  optim::AdamWOptions lazy = options;
  lazy.lazy_rows = tables.row_filter();
  optim::AdamW adamw({&dense}, lazy);
  const std::vector<std::vector<int64_t>> steps{{3, 1, 3, 7}, {5, 3}, {-1, 7}};  // -1: another tp rank's id
  torch::manual_seed(7);
  for (size_t s = 0; s < steps.size(); ++s) {
    const at::Tensor ids = at::tensor(steps[s], kLong), grads = at::randn({ids.numel(), 3}, kDouble);
    tables.pull({nn::MicroBatch{.tokens = ids}});
    EXPECT_EQ(dense.sparse, nullptr) << "the recorder is gone before forward";
    const at::Tensor valid = ids.ge(0).nonzero().squeeze(1);
    dense.grad.zero_().index_add_(0, ids.index_select(0, valid), grads.index_select(0, valid));
    sparse.table->pull(ids);
    sparse.table->accumulate(ids, grads);
    sparse.table->push();
    sparse.table->step(1e-2);
    tables.push();
    if (s == 1) {  // rows 3 and 5: elements 9..11 and 15..17; the piece [10, 16) holds 10, 11, 15
      const at::Tensor piece = dense.value.view({-1}).narrow(0, 10, 6);
      EXPECT_TRUE(tables.row_filter()->elements_of(piece).equal(at::tensor(std::vector<int64_t>{0, 1, 5}, kLong)));
      EXPECT_FALSE(tables.row_filter()->elements_of(at::zeros({3}, kDouble)).defined()) << "not the table";
    }
    adamw.step(1e-2);
    EXPECT_TENSOR_NEAR(dense.value, sparse.table->gather_full(), 1e-14);
  }
}

// The rows a lazy dense table looks up are noted by a stand-in in Param::sparse; a layer that fails
// during the pull leaves the table without it, as dense as before.
TEST(SparseTables, AFailedPullLeavesNoStandIn) {
  nn::Param table{.name = "t", .full_shape = {5, 2}, .embedding = true};
  table.value = at::zeros({5, 2}, kDouble);
  dist::NullCommunicator alone;
  models::Model model;
  model.chain.push_back(std::make_unique<LooksUpTokens>(table, true));
  replicas::SparseTables tables(model, alone, alone, {.mode = SparseMode::Off, .update = TableUpdate::Lazy});
  EXPECT_THROW(tables.pull({nn::MicroBatch{.tokens = at::tensor(std::vector<int64_t>{1, 3}, kLong)}}), Error);
  EXPECT_EQ(table.sparse, nullptr);
  ASSERT_EQ(tables.choices().size(), 1u);
  EXPECT_FALSE(tables.choices()[0].sparse);
}

TEST(SparseTable, ForeignIdsReadZerosAndDropTheirGradient) {
  OneRankTable t(5, 2, 1, {});
  const at::Tensor ids = at::tensor(std::vector<int64_t>{-1, 2, -1}, kLong);
  t.table->pull(ids);
  const at::Tensor rows = t.table->lookup(ids);
  EXPECT_TRUE(rows[0].eq(0).all().item<bool>());
  EXPECT_TENSOR_NEAR(rows[1], t.table->gather_full()[2], 1e-15);
  t.table->accumulate(ids, at::ones({3, 2}, kDouble));
  t.table->push();
  EXPECT_EQ(t.table->touched_rows(), 1);
  EXPECT_DOUBLE_EQ(t.table->grad_norm_square(), 2.0);  // row 2's gradient only
}

class DlrmLayers : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { torch::manual_seed(13); }
  at::Tensor randn(at::IntArrayRef shape) const { return at::randn(shape, at::TensorOptions().dtype(GetParam())); }
  void randomise(nn::Layer& layer) const {
    for (nn::Param* p : layer.params()) {
      nn::initialise(*p, 5, GetParam());
      p->value = at::randn(p->value.sizes(), p->value.options()) * 0.5;
    }
  }
};

TEST_P(DlrmLayers, DenseMatchesAutograd) {
  blocks::Dense layer("top.0", 6, 5, false);
  randomise(layer);
  auto reference = [](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    return torch::relu(F::linear(x, p[0], p[1]));
  };
  check_layer_against_autograd(layer, randn({7, 6}), {}, reference, randn({7, 5}));
}

TEST_P(DlrmLayers, EmbeddingBagsMatchAutogradWithRepeatedIds) {
  constexpr int64_t kTables = 3, kRows = 11, kWidth = 4, kBag = 2, kBatch = 6;
  blocks::EmbeddingBags layer(kTables, kRows, kWidth, kBag);
  randomise(layer);
  nn::MicroBatch mb;
  mb.tokens = at::randint(0, 4, {kBatch, kTables * kBag}, kLong);  // few distinct rows: repeats
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    std::vector<torch::Tensor> parts{x};
    for (int64_t f = 0; f < kTables; ++f) {
      const torch::Tensor ids = mb.tokens.narrow(1, f * kBag, kBag).reshape({-1});
      parts.push_back(p[f].index_select(0, ids).view({kBatch, kBag, kWidth}).sum(1));
    }
    return torch::cat(parts, 1);
  };
  check_layer_against_autograd(layer, randn({kBatch, kWidth}), mb, reference, randn({kBatch, (kTables + 1) * kWidth}));
}

TEST_P(DlrmLayers, ClickLossMatchesAutogradBinaryCrossEntropy) {
  blocks::ClickLoss layer(6);
  randomise(layer);
  nn::MicroBatch mb;
  mb.targets = at::randint(0, 2, {9}, kLong);
  mb.loss_scale = 1.0 / 27;  // one of three micro-batches of 9
  auto reference = [&](const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
    const auto z = F::linear(x, p[0], p[1]).squeeze(1);
    return F::binary_cross_entropy_with_logits(
               z, mb.targets.to(z.scalar_type()),
               F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum)) *
           mb.loss_scale;
  };
  check_layer_against_autograd(layer, randn({9, 6}) * 3, mb, reference, {});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DlrmLayers, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// The same bags on the sparse path give the same output, and their pushed row gradients are
// the dense gradient's non-zero rows.
TEST(DlrmLayers, SparsePathMatchesTheDensePath) {
  constexpr int64_t kTables = 2, kRows = 9, kWidth = 3, kBag = 3, kBatch = 5;
  blocks::EmbeddingBags dense(kTables, kRows, kWidth, kBag), sparse(kTables, kRows, kWidth, kBag);
  dist::NullCommunicator alone;
  std::vector<std::unique_ptr<parallel::SparseTable>> tables;
  for (int64_t f = 0; f < kTables; ++f) {
    nn::initialise(dense.tables[f], 8, at::kDouble);
    tables.push_back(
        std::make_unique<parallel::SparseTable>(sparse.tables[f], alone, 2, optim::AdamWOptions{}, TableUpdate::Lazy));
    tables.back()->initialise(8, at::kDouble);
    sparse.tables[f].sparse = tables.back().get();
  }
  torch::manual_seed(3);
  nn::MicroBatch mb;
  mb.tokens = at::randint(0, 5, {kBatch, kTables * kBag}, kLong);
  sparse.pull_rows({mb});
  const at::Tensor x = at::randn({kBatch, kWidth}, kDouble), dy = at::randn({kBatch, (kTables + 1) * kWidth}, kDouble);
  nn::Saved a, b;
  EXPECT_TENSOR_NEAR(sparse.forward(x, mb, b), dense.forward(x, mb, a), 1e-15);
  EXPECT_TENSOR_NEAR(sparse.backward_input(dy, b), dense.backward_input(dy, a), 1e-15);
  dense.backward_weight(a);
  sparse.backward_weight(b);
  for (int64_t f = 0; f < kTables; ++f) {
    tables[f]->push();
    const double want = dense.tables[f].grad.norm().item<double>();
    EXPECT_NEAR(tables[f]->grad_norm_square(), want * want, 1e-12);
    // The same sum, to the bit, as the dense table's (NOTE [Table norms]).
    EXPECT_EQ(tables[f]->grad_norm_square(), optim::grad_norm_square(dense.tables[f]));
    const at::Tensor touched = std::get<0>(at::_unique(mb.tokens.narrow(1, f * kBag, kBag)));
    ASSERT_TRUE(tables[f]->touched().equal(touched));
    EXPECT_TENSOR_NEAR(tables[f]->touched_grad(), dense.tables[f].grad.index_select(0, touched), 1e-15);
  }
}

TEST(Clicks, DeterministicInRangeAndZipfDistributed) {
  ModelConfig m;
  m.kind = "dlrm";
  m.tables = 2, m.table_rows = 1000, m.bag_size = 2, m.dense_features = 3;
  const data::ClickSource source(m, 1.05, 7);
  const nn::MicroBatch a = source.microbatch(4096, 2048, 1, 1), b = source.microbatch(4096, 2048, 1, 1);
  EXPECT_TRUE(a.tokens.equal(b.tokens) && a.dense.equal(b.dense) && a.targets.equal(b.targets));
  EXPECT_FALSE(a.tokens.equal(source.microbatch(4096, 2048, 1, 0).tokens));
  EXPECT_EQ(a.tokens.sizes(), (std::vector<int64_t>{2048, 4}));
  EXPECT_GE(a.tokens.min().item<int64_t>(), 0);
  EXPECT_LT(a.tokens.max().item<int64_t>(), 1000);
  const double clicks = a.targets.to(at::kDouble).mean().item<double>();
  EXPECT_GT(clicks, 0.05);
  EXPECT_LT(clicks, 0.95);
  // Rank 1's share is 1 / H(1000, 1.05); 4096 draws of table 0 put it within a few percent.
  double harmonic = 0;
  for (int k = 1; k <= 1000; ++k) harmonic += std::pow(k, -1.05);
  const at::Tensor ids = at::cat({a.tokens.narrow(1, 0, 2), source.microbatch(4096, 2048, 1, 0).tokens.narrow(1, 0, 2)});
  const double share = ids.eq(source.row_of(0, 0)).sum().item<double>() / static_cast<double>(ids.numel());
  EXPECT_NEAR(share, 1.0 / harmonic, 0.15 / harmonic);
  const double second = ids.eq(source.row_of(0, 1)).sum().item<double>() / static_cast<double>(ids.numel());
  EXPECT_NEAR(second, std::pow(2.0, -1.05) / harmonic, 0.2 / harmonic);
  // The exponent itself: the mean log-rank of the draws is E[ln k] under Zipf(1.05) over 1000
  // ranks, 2.950 (sd 2.13: within 0.08 is 3.4 standard errors of 8192 draws). An exponent of 1.0
  // gives 3.178 and 1.1 gives 2.726, both outside; the shares above would pass 1.0.
  double expected_log_rank = 0;
  for (int k = 1; k <= 1000; ++k) expected_log_rank += std::pow(k, -1.05) * std::log(k) / harmonic;
  at::Tensor rank_of_row = at::zeros({1000}, at::kDouble);  // the rows are 0..999 (checked above)
  for (int64_t k = 0; k < 1000; ++k) rank_of_row[source.row_of(0, k)] = static_cast<double>(k + 1);
  const at::Tensor ranks = rank_of_row.index_select(0, ids.reshape({-1}));
  ASSERT_TRUE(ranks.gt(0).all().item<bool>()) << "every draw is one of table 0's rows";
  EXPECT_NEAR(ranks.log().mean().item<double>(), expected_log_rank, 0.08);
  // The row bijection spreads ranks over the table.
  std::set<int64_t> rows;
  for (int64_t k = 0; k < 1000; ++k) rows.insert(source.row_of(1, k));
  EXPECT_EQ(rows.size(), 1000u);
}

// A clicks file written from the synthetic source reads back the same samples; a record whose id
// is past its table is refused with its position.
TEST(Clicks, FileRoundTripsAndRefusesIdsOutOfRange) {
  ModelConfig m;
  m.kind = "dlrm";
  m.tables = 3, m.table_rows = 20, m.bag_size = 2, m.dense_features = 4;
  const data::ClickSource source(m, 1.05, 9);
  const std::string path = ::testing::TempDir() + "clicks_" + std::to_string(::getpid()) + ".bin";
  // More samples than one write chunk: the last, partial chunk must hold its own samples.
  const int64_t count = data::ClickFile::kWriteChunk + 3;
  data::write_clicks(source, count, path);
  const data::ClickFile file(path, m);
  EXPECT_EQ(file.records(), count);
  const int64_t chunk = data::ClickFile::kWriteChunk;  // samples [chunk, chunk + 3): step 1 of batches of `chunk`
  const nn::MicroBatch tail = file.microbatch(chunk, 3, 1, 0), tail_want = source.microbatch(chunk, 3, 1, 0);
  EXPECT_TRUE(tail.tokens.equal(tail_want.tokens) && tail.dense.equal(tail_want.dense) &&
              tail.targets.equal(tail_want.targets));
  const nn::MicroBatch want = source.microbatch(count, 5, 0, 1), got = file.microbatch(count, 5, 0, 1);
  EXPECT_TRUE(got.tokens.equal(want.tokens) && got.dense.equal(want.dense) && got.targets.equal(want.targets));
  EXPECT_TRUE(file.microbatch(count, 5, 1, 0).tokens.equal(source.microbatch(count, 5, 0, 0).tokens))
      << "sample s reads record s mod the count";
  m.table_rows = 5;  // the same file, now with ids past the tables
  try {
    data::ClickFile small(path, m);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("out of range for model.table_rows = 5"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom::test
