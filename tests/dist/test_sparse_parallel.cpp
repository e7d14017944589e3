// Sparsity-aware data parallelism (NOTE [Sparse exchange]) against the serial run, in float64 at
// 1e-9: a DLRM and a GPT at dp = world size, with several partition counts, ZeRO on and off and
// clipping active; steps where some rows are looked up by several ranks and some by none. Then
// what travels: the exchange's exact bytes, against dense all-reduce, and where rows live.
#include <set>

#include "layout_harness.h"
#include "loom/data/clicks.h"
#include "loom/data/sampler.h"
#include "loom/parallel/sparse_table.h"
#include "world.h"

namespace loom::test {
namespace {

Config dlrm_config() {
  Config c;
  c.model.kind = "dlrm";
  c.model.d_model = 8;
  c.model.tables = 3;
  c.model.table_rows = 40;
  c.model.bag_size = 2;
  c.model.dense_features = 5;
  c.model.bottom_mlp = {16};
  c.model.top_mlp = {16};
  c.model.dtype = "float64";
  c.train.steps = 3;
  c.train.global_batch = 24;  // 12 micro-batches of 2: divisible by dp = 1, 2, 3, 4
  c.train.micro_batch = 2;
  c.train.warmup = 1;
  c.train.lr = 3e-2;
  c.train.clip = 0.05;  // active: the sparse rows are clipped with the dense gradients
  c.train.threads = 1;
  c.parallel.dp = world().size();
  c.parallel.bucket_mb = 0.001;
  return c;
}

Config gpt_config() {
  Config c = small_gpt(97, 1, 16, 12, 1);
  c.train.clip = 0.05;
  c.parallel.dp = world().size();
  return c;
}

// The rows each dp rank looks up in `step`, per table (the layout's split of the micro-batches).
std::vector<std::vector<std::set<int64_t>>> rows_by_rank(const Config& c, int64_t step) {
  const int64_t dp = c.parallel.dp, local = c.microbatch_count() / dp;
  const int64_t tables = c.model.kind == "dlrm" ? c.model.tables : 1;
  std::vector<std::vector<std::set<int64_t>>> rows(static_cast<size_t>(dp), std::vector<std::set<int64_t>>(tables));
  const data::ClickSource clicks(c.model, c.data.zipf, static_cast<uint64_t>(c.train.seed));
  const auto tokens = data::open_source(c);
  for (int64_t r = 0; r < dp; ++r) {
    for (int64_t i = 0; i < local; ++i) {
      const int64_t index = r * local + i;
      const at::Tensor ids =
          c.model.kind == "dlrm"
              ? clicks.microbatch(c.train.global_batch, c.train.micro_batch, step, index).tokens
              : data::make_microbatch(*tokens, {c.train.global_batch, c.train.micro_batch, c.model.seq_len}, step, index)
                    .tokens;
      const int64_t width = ids.size(1) / tables;
      for (int64_t t = 0; t < tables; ++t) {
        const at::Tensor part = ids.narrow(1, t * width, width).contiguous();
        rows[r][t].insert(part.data_ptr<int64_t>(), part.data_ptr<int64_t>() + part.numel());
      }
    }
  }
  return rows;
}

// The property the equivalence tests rely on to mean something: in table 0 at step 0 some row
// is looked up by two ranks or more, and some row by none.
void expect_shared_and_untouched_rows(const Config& c, int64_t table_rows) {
  const auto rows = rows_by_rank(c, 0);
  std::map<int64_t, int> ranks_per_row;
  for (const auto& rank : rows)
    for (int64_t row : rank[0]) ++ranks_per_row[row];
  int shared = 0;
  for (auto [row, n] : ranks_per_row) shared += n >= 2;
  if (c.parallel.dp > 1) EXPECT_GT(shared, 0) << "no row is looked up by several ranks";
  EXPECT_LT(static_cast<int64_t>(ranks_per_row.size()), table_rows) << "every row is looked up";
}

struct SparseCase {
  std::string model;
  int64_t partitions;
  int64_t zero;
};

class SparseParallel : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseParallel, MatchesTheSerialRunInFloat64) {
  const SparseCase& p = GetParam();
  if (12 % world().size() != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  Config c = p.model == "dlrm" ? dlrm_config() : gpt_config();
  c.parallel.sparse_partitions = p.partitions;
  c.parallel.zero = p.zero;
  expect_shared_and_untouched_rows(c, p.model == "dlrm" ? c.model.table_rows : c.model.vocab);
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  EXPECT_GT(serial.records.front().grad_norm, c.train.clip) << "clipping must be active";
  expect_same_training(layout, serial, 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseParallel,
                         ::testing::Values(SparseCase{"dlrm", 0, 0}, SparseCase{"dlrm", 1, 0},
                                           SparseCase{"dlrm", 7, 1}, SparseCase{"gpt", 0, 0},
                                           SparseCase{"gpt", 5, 1}),
                         [](const auto& info) {
                           return fmt::format("{}_P{}_zero{}", info.param.model, info.param.partitions,
                                              info.param.zero);
                         });

// The Llama on the sparse path: its token table is the one sparse table. Tied to the head, the
// table is read whole each step, so it stays dense whatever parallel.sparse says; both train the
// serial model.
class SparseParallelLlama : public ::testing::TestWithParam<SparseCase> {};  // model: "untied" | "tied"

TEST_P(SparseParallelLlama, MatchesTheSerialRunInFloat64) {
  const SparseCase& p = GetParam();
  if (12 % world().size() != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  Config c = small_llama(97, 1, 16, 12, 1, /*kv_heads=*/4, p.model == "tied");
  c.train.clip = 0.05;
  c.parallel.dp = world().size();
  c.parallel.sparse_partitions = p.partitions;
  c.parallel.zero = p.zero;
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  EXPECT_GT(serial.records.front().grad_norm, c.train.clip) << "clipping must be active";
  expect_same_training(layout, serial, 1e-9, 1e-9);
  train::Trainer trainer(c, world());
  for (nn::Param* param : trainer.model().params())
    if (param->name == "embedding.wte") EXPECT_EQ(param->sparse != nullptr, p.model == "untied");
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseParallelLlama,
                         ::testing::Values(SparseCase{"untied", 0, 0}, SparseCase{"untied", 5, 1},
                                           SparseCase{"tied", 0, 0}),
                         [](const auto& info) {
                           return fmt::format("{}_P{}_zero{}", info.param.model, info.param.partitions,
                                              info.param.zero);
                         });

// sparse = "off" is the dense model (dense AdamW on the tables), in every layout too.
TEST(SparseParallelOff, DenseTablesMatchTheSerialRun) {
  if (12 % world().size() != 0) GTEST_SKIP();
  Config c = dlrm_config();
  c.parallel.sparse = "off";
  expect_same_training(train_run(c, world()), run_serial(c), 1e-9, 1e-9);
}

// One DLRM step at dp = n. Per table: one all-to-all of counts (n int64), then all-to-all-v of
// the ids this rank looks up (8 bytes each), of the owners' rows back, and of the row gradients
// (d values each). Summed over ranks, rows served = rows asked, so the exchange moves exactly
// sum over ranks and tables of unique rows x (8 + 2 d x 8) bytes plus the counts. The dense
// gradients keep their buckets: all-reduces covering the padded dense parameters once.
TEST(SparseParallelComm, ExchangeMovesExactlyTheLookedUpRows) {
  const int n = world().size();
  if (n < 2 || 12 % n != 0) GTEST_SKIP();
  Config c = dlrm_config();
  c.train.steps = 1;
  c.parallel.sparse_partitions = 2 * n;
  train::Trainer trainer(c, world());
  const auto records = trainer.run({.peak_flops = 1e9});
  const auto ops = ops_on(trainer.comm_stats(), "dp");
  const int64_t tables = c.model.tables, d = c.model.d_model;
  EXPECT_EQ(ops.at("all_to_all"), std::pair(tables, tables * n * int64_t{8}));
  int64_t unique = 0;
  for (const auto& rank : rows_by_rank(c, 0))
    for (const auto& table : rank) unique += static_cast<int64_t>(table.size());
  at::Tensor sent = at::full({1}, ops.at("all_to_allv").second, at::kLong);
  world().all_reduce(sent, dist::ReduceOp::Sum);
  EXPECT_EQ(ops.at("all_to_allv").first, 3 * tables);
  EXPECT_EQ(sent.item<int64_t>(), unique * (8 + 2 * d * 8));
  // Dense buckets: every dense gradient element once; 8-byte loss and 16-byte sparse norms besides.
  int64_t dense = 0, bucket_bytes = 0;
  for (nn::Param* p : trainer.model().params())
    if (p->sparse == nullptr) dense += p->numel();
  for (const auto& r : trainer.comm_stats().records)
    if (r.axis == "dp" && r.op == "all_reduce" && r.bytes > 16) bucket_bytes += r.bytes;
  EXPECT_EQ(bucket_bytes, (dense + n - 1) / n * n * 8);
  // Every row lives on exactly one rank, and no rank holds more than its partitions' share.
  int64_t owned = 0;
  for (nn::Param* p : trainer.model().params())
    if (p->sparse != nullptr) owned += dynamic_cast<const parallel::SparseTable&>(*p->sparse).owned_rows();
  at::Tensor total = at::full({1}, owned, at::kLong);
  world().all_reduce(total, dist::ReduceOp::Sum);
  EXPECT_EQ(total.item<int64_t>(), tables * c.model.table_rows);
  EXPECT_LE(owned, tables * ((c.model.table_rows + 2 * n - 1) / (2 * n)) * 2);
  // Against dense all-reduce of the same model: fewer bytes over dp.
  c.parallel.sparse = "off";
  train::Trainer dense_trainer(c, world());
  const auto dense_records = dense_trainer.run({.peak_flops = 1e9});
  EXPECT_LT(records.back().comm_bytes.at("dp"), dense_records.back().comm_bytes.at("dp"));
}

// parallel.sparse_partitions = 0 chooses P from trials on every rank alike.
TEST(SparseParallelComm, ChosenPartitionCountAgreesOverRanks) {
  const int n = world().size();
  if (12 % n != 0) GTEST_SKIP();
  Config c = dlrm_config();
  c.train.steps = 1;
  train::Trainer trainer(c, world());
  const int64_t chosen = trainer.sparse_partitions();
  EXPECT_GE(chosen, 1);
  EXPECT_LE(chosen, c.model.table_rows);
  if (n > 1) EXPECT_GE(trainer.partition_trials().size(), 3u);
  at::Tensor all = at::empty({n}, at::kLong);
  world().all_gather(at::full({1}, chosen, at::kLong), all);
  EXPECT_TRUE(all.eq(chosen).all().item<bool>());
}

}  // namespace
}  // namespace loom::test
