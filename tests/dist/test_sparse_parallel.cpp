// Sparsity-aware data parallelism (NOTE [Sparse exchange]) against the serial run, in float64 at
// 1e-9: a DLRM and a GPT at dp = world size, with several partition counts, ZeRO on and off,
// both table updates and clipping active; steps where some rows are looked up by several ranks
// and some by none. The exchange never changes the model: tables dense or on the sparse path
// train the serial dense-table run under every axis (dp + ZeRO-1, tp with the vocabulary-parallel
// embedding, pp, sp) and both updates, in float64 and in float32; "auto" agrees over the ranks.
// In float32, the partition count and (at a group of two) the path change no bit.
// Then what travels: the exchange's exact bytes, against dense all-reduce, and where rows live.
#include <fmt/format.h>

#include <set>

#include "layout_harness.h"
#include "loom/data/clicks.h"
#include "loom/data/sampler.h"
#include "loom/parallel/sparse_table.h"
#include "noisy_communicator.h"
#include "world.h"

namespace loom::test {
namespace {

// The table path is pinned here, as in every layout suite ("off"; each test sets what it runs):
// "auto" chooses by timing, and only the tests of "auto" itself may leave it to that.
Config dlrm_config() {
  Config c = small_dlrm(/*global_batch=*/24, /*micro_batch=*/2);  // 12 micro-batches: dp = 1, 2, 3, 4
  c.train.clip = 0.05;  // active: the sparse rows are clipped with the dense gradients
  c.parallel.dp = world().size();
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
  TableUpdate update = TableUpdate::Lazy;
};

std::string case_name(const SparseCase& p) {
  return fmt::format("{}_P{}_zero{}_{}", p.model, p.partitions, p.zero, Option<TableUpdate>(p.update).name());
}

// The serial run with every table dense: the model whatever the exchange.
TrainedRun run_serial_dense(Config c) {
  c.parallel.sparse = "off";
  return run_serial(c);
}

class SparseParallel : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseParallel, MatchesTheSerialRunInFloat64) {
  const SparseCase& p = GetParam();
  if (12 % world().size() != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  Config c = p.model == "dlrm" ? dlrm_config() : gpt_config();
  c.parallel.sparse = "on";
  c.parallel.sparse_partitions = p.partitions;
  c.parallel.zero = p.zero;
  c.train.table_update = p.update;
  expect_shared_and_untouched_rows(c, p.model == "dlrm" ? c.model.table_rows : c.model.vocab);
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  EXPECT_GT(serial.records.front().grad_norm, c.train.clip) << "clipping must be active";
  expect_same_training(layout, serial, 1e-9, 1e-9);
  expect_same_training(layout, run_serial_dense(c), 1e-9, 1e-9);  // the exchange is not the model
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseParallel,
                         ::testing::Values(SparseCase{"dlrm", 0, 0}, SparseCase{"dlrm", 1, 0},
                                           SparseCase{"dlrm", 7, 1}, SparseCase{"gpt", 0, 0},
                                           SparseCase{"gpt", 5, 1}, SparseCase{"dlrm", 0, 0, TableUpdate::Dense},
                                           SparseCase{"dlrm", 7, 1, TableUpdate::Dense},
                                           SparseCase{"gpt", 5, 1, TableUpdate::Dense},
                                           SparseCase{"dlrm", 7, 3}, SparseCase{"gpt", 5, 3}, SparseCase{"gpt", 5, 2},
                                           SparseCase{"dlrm", 7, 3, TableUpdate::Dense}),
                         [](const auto& info) { return case_name(info.param); });

// The Llama on the sparse path: its token table is the one sparse table. Tied to the head, the
// table is read whole each step, so it stays dense whatever parallel.sparse says; both train the
// serial model.
class SparseParallelLlama : public ::testing::TestWithParam<SparseCase> {};  // model: "untied" | "tied"

TEST_P(SparseParallelLlama, MatchesTheSerialRunInFloat64) {
  const SparseCase& p = GetParam();
  if (12 % world().size() != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  Config c = small_llama(97, 1, 16, 12, 1, /*kv_heads=*/4, p.model == "tied");
  c.train.clip = 0.05;
  c.parallel.sparse = "on";
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
                                           SparseCase{"tied", 0, 0}, SparseCase{"untied", 5, 3}, SparseCase{"tied", 0, 3}),
                         [](const auto& info) {
                           return fmt::format("{}_P{}_zero{}", info.param.model, info.param.partitions,
                                              info.param.zero);
                         });

// sparse = "off": the tables are dense parameters (all-reduced or ZeRO-1's shards), updated by
// AdamW over every row or, lazy, over the rows some rank looked up (NOTE [Lazy rows of dense
// tables]): the same model as the sparse path's serial run.
class SparseParallelOff : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseParallelOff, DenseTablesMatchTheSerialRun) {
  const SparseCase& p = GetParam();
  if (12 % world().size() != 0) GTEST_SKIP();
  Config c = p.model == "dlrm" ? dlrm_config() : gpt_config();
  c.parallel.sparse = "off";
  c.parallel.zero = p.zero;
  c.train.table_update = p.update;
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, run_serial(c), 1e-9, 1e-9);
  c.parallel.sparse = "on";
  expect_same_training(layout, run_serial(c), 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseParallelOff,
                         ::testing::Values(SparseCase{"dlrm", 0, 0, TableUpdate::Dense},
                                           SparseCase{"dlrm", 0, 1, TableUpdate::Lazy},
                                           SparseCase{"gpt", 0, 0, TableUpdate::Lazy},
                                           SparseCase{"gpt", 0, 2, TableUpdate::Lazy},
                                           SparseCase{"dlrm", 0, 3, TableUpdate::Dense}),
                         [](const auto& info) { return case_name(info.param); });

// What "auto" may choose changes no bit in float32 (NOTE [Table norms], NOTE [Reproducible table
// choices]), with clipping active so that the norm reaches every weight: the partition count (1,
// 2, one per row) never, at any group size, with ZeRO-1 too; the table's path (sparse on or off)
// at a group of two replicas or fewer without ZeRO-1, where a dense all-reduce adds the terms the
// owner adds. The float64 tests above show each choice trains the serial model.
struct ChoiceCase {
  std::string model;
  int64_t zero;
  TableUpdate update;
};

class SparseParallelBits : public ::testing::TestWithParam<ChoiceCase> {};

TEST_P(SparseParallelBits, ChoicesChangeNoWeightInFloat32) {
  const ChoiceCase& p = GetParam();
  const int n = world().size();
  if (12 % n != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  Config c = p.model == "dlrm" ? dlrm_config() : gpt_config();
  c.model.dtype = "float32";
  c.parallel.zero = p.zero;
  c.train.table_update = p.update;
  const int64_t rows = p.model == "dlrm" ? c.model.table_rows : c.model.vocab;  // the most partitions
  c.parallel.sparse = "on";
  std::vector<std::pair<std::string, TrainedRun>> runs;
  for (const int64_t partitions : {int64_t{1}, int64_t{2}, rows}) {
    c.parallel.sparse_partitions = partitions;
    runs.emplace_back(fmt::format("sparse at P = {}", partitions), train_run(c, world()));
  }
  if (n <= 2 && p.zero == 0) {
    c.parallel.sparse = "off";
    c.parallel.sparse_partitions = 0;
    runs.emplace_back("dense", train_run(c, world()));
  }
  EXPECT_GT(runs.front().second.records.front().grad_norm, c.train.clip) << "clipping must be active";
  for (size_t i = 1; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i].first + " against " + runs.front().first);
    expect_identical_training(runs[i].second, runs.front().second);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseParallelBits,
                         ::testing::Values(ChoiceCase{"dlrm", 0, TableUpdate::Dense},
                                           ChoiceCase{"dlrm", 0, TableUpdate::Lazy},
                                           ChoiceCase{"dlrm", 1, TableUpdate::Lazy},
                                           ChoiceCase{"gpt", 0, TableUpdate::Lazy}),
                         [](const auto& info) {
                           return fmt::format("{}_zero{}_{}", info.param.model, info.param.zero,
                                              Option<TableUpdate>(info.param.update).name());
                         });

// A run of parallel.sparse = "auto" over `comm` (the world, or the world with noise): every rank of
// the group took the same path for each table and the same partition count (the times are agreed),
// and whatever it took, the model is the serial dense-table run's.
void expect_auto_agrees(const Config& c, dist::Communicator& comm) {
  const int n = world().size();
  train::Trainer trainer(c, comm);
  const auto records = trainer.run({.peak_flops = 1e9});
  const std::vector<replicas::TableChoice> choices = trainer.table_choices();
  ASSERT_EQ(static_cast<int64_t>(choices.size()), c.model.tables);
  const int64_t k = c.model.tables;
  at::Tensor mine = at::zeros({2 * k + 1}, at::kLong), all = at::empty({n * (2 * k + 1)}, at::kLong);
  for (size_t t = 0; t < choices.size(); ++t) {
    mine[static_cast<int64_t>(t)] = choices[t].sparse ? 1 : 0;
    mine[k + static_cast<int64_t>(t)] = choices[t].sparse == records.back().tables[t].sparse;
    if (n > 1) EXPECT_GT(choices[t].dense_ms, 0) << choices[t].reason;  // measured
    else EXPECT_FALSE(choices[t].sparse) << "one replica keeps its tables dense";
  }
  mine[2 * k] = trainer.sparse_partitions();
  world().all_gather(mine, all);
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(all.narrow(0, r * mine.numel(), mine.numel()).equal(all.narrow(0, 0, mine.numel())))
        << "rank " << r << " chose otherwise than rank 0: " << all;
  int sparse = 0;
  for (nn::Param* p : trainer.model().params()) sparse += p->sparse != nullptr;
  EXPECT_EQ(sparse, std::count_if(choices.begin(), choices.end(), [](const auto& x) { return x.sparse; }));
  TrainedRun layout{.records = records};
  for (nn::Param* p : trainer.model().params()) {
    layout.names.push_back(p->name);
    layout.weights.push_back(trainer.value_of(*p).clone());
    layout.shards.push_back(p->part());
  }
  expect_same_training(layout, run_serial_dense(c), 1e-9, 1e-9);
}

// parallel.sparse = "auto", the one path a test leaves to timing: what it chooses may differ from
// run to run, that every rank chooses alike and trains the same model may not. Never a timing.
TEST(SparseParallelAuto, ChoosesAlikeOnEveryRankAndTrainsTheSameModel) {
  if (12 % world().size() != 0) GTEST_SKIP();
  for (const TableUpdate update : {TableUpdate::Dense, TableUpdate::Lazy}) {
    SCOPED_TRACE(Option<TableUpdate>(update).name());
    Config c = dlrm_config();
    c.parallel.sparse = "auto";
    c.train.table_update = update;
    expect_auto_agrees(c, world());
  }
}

// The same under injected timing noise (tests/dist/noisy_communicator.h): each rank's operations
// finish late by a random while of its own (up to 1 ms), and by 5 ms more for the exchanges on even
// ranks and the reductions on odd ones, so each rank's own trials rank the paths (and partition
// counts) otherwise than its neighbour's; the agreed times still decide alike. Without the
// agreement (the maximum over the group and tp in SparseTables) this test fails.
TEST(SparseParallelAuto, AgreesUnderTimingNoise) {
  const int n = world().size();
  if (n == 1 || 12 % n != 0) GTEST_SKIP() << "noise between ranks needs two ranks or more";
  Config c = dlrm_config();
  c.parallel.sparse = "auto";
  NoisyCommunicator noisy(world(), /*max_us=*/1000);
  expect_auto_agrees(c, noisy);
}

// The layout-equivalence suite with tables dense and on the sparse path: each axis (dp with
// ZeRO-1; tp = 2 with the vocabulary-parallel embedding; pp = 2; sp = 2; the rest of the world
// in dp) x parallel.sparse "off" / "on" x train.table_update "dense" / "lazy", against the serial
// run with dense tables. "off" is what runs the tensor-parallel dense embedding, ZeRO-1 over the
// embedding and the table's all-reduce; "on" its shard's exchange over the replicas.
struct TableLayout {
  std::string axis;    // "dp_zero1", "tp", "pp", "sp"
  std::string sparse;  // "off" | "on"
  TableUpdate update;
  std::string dtype = "float64";
};

// The layout on `n` ranks, or "" when it does not exist there (tp, pp and sp need an even world).
std::string apply_layout(const TableLayout& l, int n, Config& c) {
  if (n == 1) return "a world of one is the serial run";
  if (l.axis == "dp_zero1") {
    if (12 % n != 0) return "dp must divide the 12 micro-batches";
    c.parallel.dp = n, c.parallel.zero = 1;
    return "";
  }
  if (n % 2 != 0) return "an axis of 2 needs an even world";
  c.parallel.dp = n / 2;
  (l.axis == "tp" ? c.parallel.tp : l.axis == "pp" ? c.parallel.pp : c.parallel.sp) = 2;
  return "";
}

class SparseParallelLayouts : public ::testing::TestWithParam<TableLayout> {};

TEST_P(SparseParallelLayouts, MatchTheSerialDenseTableRun) {
  const TableLayout& l = GetParam();
  Config c = small_gpt(97, 2, 16, 12, 1);  // vocabulary padded to 98 under tp = 2
  c.model.dtype = l.dtype;
  c.train.clip = 0.05;
  c.train.table_update = l.update;
  c.parallel.sparse = l.sparse;
  if (const std::string skip = apply_layout(l, world().size(), c); !skip.empty()) GTEST_SKIP() << skip;
  const TrainedRun layout = train_run(c, world());
  if (l.dtype == "float64") {
    expect_same_training(layout, run_serial_dense(c), 1e-9, 1e-9);
  } else {
    // float32: losses to 1e-5 relative, as the float32 dp check (test_data_parallel.cpp). Each
    // layout sums the same terms in another order (tp's partial products, sp's attention pieces,
    // the replicas' gradient sums), a few units of float32's roundoff 6e-8 per reduction, which
    // three AdamW steps carry into the weights; the loss sees them at about 1e-6 relative. The
    // weights only to 1e-3: AdamW divides by sqrt(v), so where a gradient element is near zero a
    // rounding difference becomes a visible update difference. Float64 above is the strict proof.
    expect_same_training(layout, run_serial_dense(c), 1e-5, 1e-3);
  }
}

std::vector<TableLayout> table_layouts() {
  std::vector<TableLayout> out;
  for (const char* axis : {"dp_zero1", "tp", "pp", "sp"})
    for (const char* sparse : {"off", "on"})
      for (const TableUpdate update : {TableUpdate::Dense, TableUpdate::Lazy}) out.push_back({axis, sparse, update});
  // Float32 layouts under tp, pp and sp, joining the float32 dp check: tables dense and sparse.
  for (const char* axis : {"tp", "pp", "sp"}) {
    out.push_back({axis, "off", TableUpdate::Dense, "float32"});
    out.push_back({axis, "on", TableUpdate::Lazy, "float32"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Axes, SparseParallelLayouts, ::testing::ValuesIn(table_layouts()), [](const auto& info) {
  const TableLayout& l = info.param;
  return fmt::format("{}_sparse_{}_{}_{}", l.axis, l.sparse, Option<TableUpdate>(l.update).name(), l.dtype);
});

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
  c.parallel.sparse = "on";
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
  c.parallel.sparse = "on";
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
