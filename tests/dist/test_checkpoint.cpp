// Checkpoints across layouts (NOTE [Checkpoints], NOTE [Resuming]). A run stopped after step k
// (TrainOptions.stop_after, which saves) and resumed by a new Trainer continues the run it
// interrupted:
// - in the same layout, bit for bit: the continued losses, gradient norms and final weights equal
//   (==) the uninterrupted run's in float64 and float32, with parallel.sparse = auto carrying its
//   choice over and with ZeRO-1;
// - in another layout (dp x tp -> pp x sp, ZeRO on <-> off, the sparse path's partitions changed,
//   sparse on <-> off, lazy table updates, GPT and Llama with a tied head), the continued steps and
//   the final weights are those of the uninterrupted serial run, in float64 to 1e-9 relative;
// - saved by the whole world and resumed in a world of one (rank 0 alone), the same;
// - a vocabulary that tp pads (97 rows, 98 at tp = 2) resumes with tp changed: the padding row is
//   a layout's, not the model's.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "layout_harness.h"
#include "loom/ckpt/checkpoint_dir.h"
#include "world.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 5;      // the whole run
constexpr int64_t kStopAfter = 2;  // the interrupted run's last step; the resumed one trains 3..5

// A fresh directory for this test's checkpoints, the same path on every rank:
// /tmp/loom-ckpt-test-<test>-np<N>-<pid of rank 0> (ctest runs the world sizes at once). Rank 0
// makes it and, after every rank is done with it, removes it. Collective (construction and
// destruction).
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("{}-{}", info->test_suite_name(), info->name());
    for (char& ch : name)
      if (std::isalnum(static_cast<unsigned char>(ch)) == 0 && ch != '-') ch = '_';
    at::Tensor pid = at::full({1}, static_cast<int64_t>(::getpid()), at::kLong);
    world().broadcast(pid, 0);
    path_ = fmt::format("/tmp/loom-ckpt-test-{}-np{}-{}", name, world().size(), pid.item<int64_t>());
    if (world().rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    world().barrier();
  }
  ~ScratchDir() {
    // Unwinding from an exception on this rank alone, a barrier would hold the exception's message
    // until the others' watchdog ends the job: leave at once, the others' collectives report it.
    if (std::uncaught_exceptions() == 0) world().barrier();
    if (world().rank() == 0) fs::remove_all(path_);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One Trainer's run and what it says about checkpoints.
struct Leg {
  TrainedRun run;
  int64_t start_step = 0;
  std::string resumed_from, last_checkpoint;
  std::vector<replicas::TableChoice> tables;  // this rank's tables' paths
  int64_t partitions = 0;
};

// Collective over `comm`: a new Trainer of `config` (resuming from `resume`, as train::Trainer
// takes it) runs to the end or to `stop_after`.
Leg run_leg(const Config& config, dist::Communicator& comm, const std::string& resume, int64_t stop_after) {
  train::Trainer trainer(config, comm, resume);
  Leg leg;
  leg.start_step = trainer.start_step();
  leg.resumed_from = trainer.resumed_from();
  leg.run.records = trainer.run({.peak_flops = 1e9, .stop_after = stop_after});
  for (nn::Param* p : trainer.model().params()) {
    leg.run.names.push_back(p->name);
    leg.run.weights.push_back(trainer.value_of(*p).clone());  // a sparse table gathered from its owners
    leg.run.shards.push_back(p->part());
  }
  leg.last_checkpoint = trainer.last_checkpoint();
  leg.tables = trainer.table_choices();
  leg.partitions = trainer.sparse_partitions();
  return leg;
}

// The uninterrupted serial run of `config`, on every rank alone: it saves nothing (the ranks
// would write the same checkpoint directory at once).
TrainedRun serial_run(Config config) {
  config.checkpoint = CheckpointConfig{};
  return run_serial(config);
}

// The run from step `from` on: its records after that step, its final weights.
TrainedRun from_step(TrainedRun run, int64_t from) {
  run.records.erase(run.records.begin(), run.records.begin() + from);
  return run;
}

// The largest relative differences of `got` from `want` on this rank: of the losses (per step)
// and of the weights (each parameter's, or its shard's slice of the serial one, as a norm).
std::pair<double, double> differences(const TrainedRun& got, const TrainedRun& want) {
  double loss = 0, weight = 0;
  for (size_t i = 0; i < std::min(got.records.size(), want.records.size()); ++i)
    loss = std::max(loss, std::abs(got.records[i].loss - want.records[i].loss) / std::abs(want.records[i].loss));
  for (size_t g = 0; g < got.weights.size(); ++g) {
    const auto it = std::find(want.names.begin(), want.names.end(), got.names[g]);
    if (it == want.names.end()) continue;  // the comparison itself reports it
    const at::Tensor& serial = want.weights[static_cast<size_t>(it - want.names.begin())];
    const Shard& shard = got.shards[g];
    if (shard.dim < 0) {
      if (got.weights[g].sizes() == serial.sizes()) weight = std::max(weight, relative_error(got.weights[g], serial));
      continue;
    }
    const int64_t real = std::clamp<int64_t>(serial.size(shard.dim) - shard.start, 0, shard.length);
    if (real > 0)
      weight = std::max(weight, relative_error(got.weights[g].narrow(shard.dim, 0, real),
                                               serial.narrow(shard.dim, shard.start, real)));
  }
  return {loss, weight};
}

// Prints the differences (largest over `comm`'s ranks; collective) from rank 0: what the
// tolerance is measured against.
void report_differences(const TrainedRun& got, const TrainedRun& want, dist::Communicator& comm) {
  const auto [loss, weight] = differences(got, want);
  at::Tensor both = at::tensor({loss, weight}, at::kDouble);
  comm.all_reduce(both, dist::ReduceOp::Max);
  if (comm.rank() == 0) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::printf("[ measured ] %s.%s np%d: max relative difference: losses %.3g, weights %.3g\n",
                info->test_suite_name(), info->name(), world().size(), both[0].item<double>(),
                both[1].item<double>());
  }
}

// The interrupted run saved step k in `dir` and the resumed one started there. False when the
// runs did not train the steps they should (alike on every rank: the callers' ASSERT_TRUE then
// leaves on every rank, before any collective).
bool expect_saved_and_resumed(const Leg& saved, const Leg& resumed, const std::string& dir) {
  const std::string step_dir = (fs::path(dir) / ckpt::step_name(kStopAfter)).string();
  EXPECT_EQ(saved.last_checkpoint, step_dir);
  EXPECT_EQ(resumed.start_step, kStopAfter);
  EXPECT_EQ(resumed.resumed_from, step_dir);
  EXPECT_EQ(static_cast<int64_t>(saved.run.records.size()), kStopAfter);
  EXPECT_EQ(static_cast<int64_t>(resumed.run.records.size()), kSteps - kStopAfter);
  if (static_cast<int64_t>(saved.run.records.size()) != kStopAfter ||
      static_cast<int64_t>(resumed.run.records.size()) != kSteps - kStopAfter)
    return false;
  EXPECT_EQ(saved.run.records.back().step, kStopAfter);
  EXPECT_GT(saved.run.records.back().checkpoint_s, 0) << "the stopping step saves";
  EXPECT_EQ(resumed.run.records.front().step, kStopAfter + 1);
  return true;
}

// vocab 96: whole rows per rank at tp = 2 and 4. 97 is padded to 98 rows at tp = 2 (NOTE
// [Vocabulary padding]): the vocabulary-padding cases below.
Config model_config(const std::string& model, const std::string& dtype = "float64", int64_t vocab = 96) {
  Config c = model == "gpt" ? small_gpt(vocab, 2, 16, 8, 1)  // 8 micro-batches: dp = 1, 2, 4
                            : small_llama(vocab, 2, 16, 8, 1, /*kv_heads=*/4, model == "llama_tied");
  if (model.starts_with("llama_moe")) {  // 4 experts of width 16, top 2, in block 1 (NOTE [Mixture-of-experts block])
    c.model.moe_experts = 4;
    c.model.moe_every = 2;
    c.model.moe_ffn_hidden = 16;
  }
  if (model == "llama_moe_bias") {  // NOTE [Expert balance]: the choice's bias is state the resume must restore
    c.model.moe_balance = MoeBalance::Bias;
    c.model.moe_bias_rate = 0.004;  // the bias at the save (step 2) is not zero
  }
  c.model.dtype = dtype;
  c.train.steps = kSteps;
  c.train.clip = 0.05;  // active: the global norm over every shard decides each update
  return c;
}

// ---------------------------------------------------------------------------------------------
// 1. The same layout resumes bit-identically.

struct SameCase {
  std::string model, dtype;
  int zero;
  // "on": the table's rows and moments live with their owners (2 partitions); "auto": the path a
  // run measured must carry over to its resumption (the one purpose here of leaving it to timing).
  std::string sparse = "off";
  TableUpdate update = TableUpdate::Dense;
};

// The world's layout: dp = 2 at two ranks, dp = 2 x tp = 2 at four, one process at one.
void apply_world_layout(Config& c, int n) {
  c.parallel.tp = n >= 4 ? 2 : 1;
  c.parallel.dp = n / c.parallel.tp;
}

std::string case_name(const SameCase& p) {
  return fmt::format("{}_{}_zero{}{}{}", p.model, p.dtype, p.zero, p.sparse == "off" ? "" : "_sparse_" + p.sparse,
                     p.update == TableUpdate::Lazy ? "_lazy" : "");
}

void PrintTo(const SameCase& p, std::ostream* os) { *os << case_name(p); }

class CheckpointSameLayout : public ::testing::TestWithParam<SameCase> {};

TEST_P(CheckpointSameLayout, ResumesBitIdentically) {
  const SameCase& p = GetParam();
  const int n = world().size();
  if (n != 1 && n != 2 && n != 4) GTEST_SKIP() << "a layout of 1, 2 or 4 ranks";
  ScratchDir dir;
  Config c = model_config(p.model, p.dtype, /*vocab=*/97);  // padded to 98 at tp = 2: the same padding resumes
  apply_world_layout(c, n);
  c.parallel.zero = p.zero;
  c.train.table_update = p.update;
  c.parallel.sparse = p.sparse;
  if (p.sparse == "on") c.parallel.sparse_partitions = 2;
  c.checkpoint.dir = dir.path();

  const Leg saved = run_leg(c, world(), "", kStopAfter);
  const Leg resumed = run_leg(c, world(), "auto", 0);
  ASSERT_TRUE(expect_saved_and_resumed(saved, resumed, dir.path()));

  // "auto" measured its paths (or, with one replica, kept the table dense); the resumed run took
  // the saved choices instead of measuring again.
  EXPECT_EQ(resumed.tables.size(), saved.tables.size());
  bool sparse = false;
  for (size_t t = 0; t < std::min(saved.tables.size(), resumed.tables.size()); ++t) {
    EXPECT_EQ(resumed.tables[t].table, saved.tables[t].table);
    EXPECT_EQ(resumed.tables[t].sparse, saved.tables[t].sparse);
    if (n > 1 && p.sparse == "auto") EXPECT_EQ(resumed.tables[t].reason, "auto: as the saved run chose");
    sparse = sparse || saved.tables[t].sparse;
  }
  EXPECT_EQ(resumed.partitions, saved.partitions);
  if (world().rank() == 0 && p.sparse == "auto")
    std::printf("[ measured ] %s np%d: auto chose %s (partitions %lld); the resumed run took it over\n",
                case_name(p).c_str(), n, sparse ? "the sparse path" : "a dense table",
                static_cast<long long>(saved.partitions));

  // The uninterrupted run, its tables on the path (and partition count) the saved run chose:
  // a measured choice is not repeatable, and it is part of how the sums are ordered.
  Config straight = c;
  straight.checkpoint.dir = "";
  straight.parallel.sparse = sparse ? "on" : "off";
  straight.parallel.sparse_partitions = sparse ? saved.partitions : 0;
  const Leg whole = run_leg(straight, world(), "", 0);
  ASSERT_EQ(static_cast<int64_t>(whole.run.records.size()), kSteps);

  for (int64_t s = 0; s < kSteps; ++s) {
    const train::StepRecord& want = whole.run.records[static_cast<size_t>(s)];
    const train::StepRecord& got = s < kStopAfter ? saved.run.records[static_cast<size_t>(s)]
                                                  : resumed.run.records[static_cast<size_t>(s - kStopAfter)];
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.loss, want.loss) << "step " << want.step;
    EXPECT_EQ(got.grad_norm, want.grad_norm) << "step " << want.step;
    EXPECT_EQ(got.lr, want.lr) << "step " << want.step;
  }
  ASSERT_EQ(resumed.run.names, whole.run.names);
  ASSERT_FALSE(resumed.run.weights.empty());
  for (size_t i = 0; i < whole.run.weights.size(); ++i) {
    EXPECT_EQ(resumed.run.shards[i].start, whole.run.shards[i].start) << whole.run.names[i];
    EXPECT_EQ(resumed.run.weights[i].scalar_type(), whole.run.weights[i].scalar_type()) << whole.run.names[i];
    EXPECT_TRUE(at::equal(resumed.run.weights[i], whole.run.weights[i]))
        << whole.run.names[i] << ": max |difference| "
        << (resumed.run.weights[i] - whole.run.weights[i]).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CheckpointSameLayout,
                         ::testing::Values(SameCase{"gpt", "float64", 0}, SameCase{"gpt", "float64", 1, "auto"},
                                           SameCase{"gpt", "float32", 0}, SameCase{"gpt", "float32", 1},
                                           SameCase{"gpt", "float64", 1, "on"}, SameCase{"gpt", "float32", 0, "on"},
                                           SameCase{"gpt", "float64", 0, "on", TableUpdate::Lazy},
                                           SameCase{"llama_tied", "float64", 1, "auto"}, SameCase{"llama", "float32", 0},
                                           SameCase{"llama", "float32", 1, "on", TableUpdate::Lazy}),
                         [](const auto& info) { return case_name(info.param); });

// ---------------------------------------------------------------------------------------------
// 2, 3. Another layout continues the serial run.

// tp x pp x sp as given, dp the rest of the world.
struct Layout {
  int tp = 1, pp = 1, sp = 1, zero = 0, ep = 1;
  std::string sparse = "off";  // pinned (tests/dist/layout_harness.h, train_run)
  int64_t partitions = 0;
};

std::string describe(const Layout& l) {
  std::string out;
  if (l.tp > 1) out += fmt::format("tp{}", l.tp);
  if (l.pp > 1) out += fmt::format("pp{}", l.pp);
  if (l.sp > 1) out += fmt::format("sp{}", l.sp);
  if (out.empty()) out = "dp";
  if (l.zero) out += l.zero == 1 ? std::string("_zero") : fmt::format("_zero{}", l.zero);
  if (l.ep > 1) out += fmt::format("_ep{}", l.ep);
  if (l.sparse != "off") out += "_sparse" + l.sparse;
  if (l.partitions > 0) out += fmt::format("P{}", l.partitions);
  return out;
}

// The layout over `n` ranks, or why it does not exist there.
std::string apply_layout(const Layout& l, int n, Config& c) {
  const int others = l.tp * l.pp * l.sp;
  if (n % others != 0) return fmt::format("{} needs a multiple of {} ranks", describe(l), others);
  c.parallel.dp = n / others;
  if (c.parallel.dp % l.ep != 0) return fmt::format("{} needs ep to divide dp = {}", describe(l), c.parallel.dp);
  c.parallel.ep = l.ep;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.sp = l.sp;
  c.parallel.zero = l.zero;
  c.parallel.sparse = l.sparse;
  c.parallel.sparse_partitions = l.partitions;
  return "";
}

struct AcrossCase {
  std::string name, model;
  Layout save, resume;
  TableUpdate update = TableUpdate::Dense;
  bool async = false;  // checkpoint.async for the save
  int64_t vocab = 96;
};

void PrintTo(const AcrossCase& p, std::ostream* os) { *os << p.name; }

class CheckpointAcrossLayouts : public ::testing::TestWithParam<AcrossCase> {};

TEST_P(CheckpointAcrossLayouts, ContinuesTheSerialRun) {
  const AcrossCase& p = GetParam();
  const int n = world().size();
  Config c = model_config(p.model, "float64", p.vocab);
  c.train.table_update = p.update;
  Config save = c, resume = c;
  if (std::string skip = apply_layout(p.save, n, save); !skip.empty()) GTEST_SKIP() << skip;
  if (std::string skip = apply_layout(p.resume, n, resume); !skip.empty()) GTEST_SKIP() << skip;
  ScratchDir dir;
  save.checkpoint.dir = resume.checkpoint.dir = dir.path();
  save.checkpoint.async = p.async;

  const Leg saved = run_leg(save, world(), "", kStopAfter);
  const Leg resumed = run_leg(resume, world(), "auto", 0);
  ASSERT_TRUE(expect_saved_and_resumed(saved, resumed, dir.path()));
  if (p.resume.sparse == "on" && !resumed.tables.empty()) {  // a pipeline stage without the embedding has none
    EXPECT_EQ(resumed.partitions, p.resume.partitions) << "the resumed layout's partitions, not the saved ones";
  }

  const TrainedRun serial = serial_run(save);
  // The saved run is the serial run's first steps (the layout itself, before any checkpoint).
  for (int64_t s = 0; s < kStopAfter; ++s) {
    const double got = saved.run.records[static_cast<size_t>(s)].loss;
    const double want = serial.records[static_cast<size_t>(s)].loss;
    EXPECT_LE(std::abs(got - want), 1e-9 * std::abs(want)) << "saved run, step " << s + 1;
  }
  // The resumed run is the serial run's remaining steps and ends with its weights.
  expect_same_training(resumed.run, from_step(serial, kStopAfter), 1e-9, 1e-9);
  report_differences(resumed.run, from_step(serial, kStopAfter), world());
}

std::vector<AcrossCase> across_cases() {
  const TableUpdate lazy = TableUpdate::Lazy;
  return {
      // dp = 2 x tp = 2 -> pp = 2 x sp = 2 at four ranks.
      {"gpt_dp_tp_to_pp_sp", "gpt", {.tp = 2}, {.pp = 2, .sp = 2}},
      {"gpt_tp_to_pp", "gpt", {.tp = 2}, {.pp = 2}},
      // ZeRO-1 <-> replicated moments (ZeRO's shards are runs of the flat parameters).
      {"gpt_zero_to_replicated", "gpt", {.zero = 1}, {.zero = 0}, TableUpdate::Dense, /*async=*/true},
      {"gpt_replicated_to_zero", "gpt", {.zero = 0}, {.zero = 1}},
      {"gpt_replicated_to_zero_tp", "gpt", {.zero = 0}, {.tp = 2, .zero = 1}},
      // ZeRO-3 <-> replicated and ZeRO-1 (its owned ranges are runs of each layer's vector), any dp.
      {"gpt_zero3_to_replicated", "gpt", {.zero = 3}, {.zero = 0}, TableUpdate::Dense, /*async=*/true, 97},
      {"gpt_replicated_to_zero3_tp", "gpt", {.zero = 0}, {.tp = 2, .zero = 3}, TableUpdate::Dense, false, 97},
      {"gpt_zero3_pp_to_zero2_sp", "gpt", {.pp = 2, .zero = 3}, {.sp = 2, .zero = 2}},
      {"llama_tied_zero3_to_zero1_tp", "llama_tied", {.zero = 3}, {.tp = 2, .zero = 1}},
      {"gpt_lazy_zero2_to_sparse", "gpt", {.zero = 2}, {.sparse = "on", .partitions = 2}, lazy},
      // The sparse path's owners: other partitions, then dense tables, then back.
      {"gpt_sparse_P2_to_P3", "gpt", {.sparse = "on", .partitions = 2}, {.sparse = "on", .partitions = 3}},
      {"gpt_sparse_on_to_off", "gpt", {.zero = 1, .sparse = "on", .partitions = 2}, {.sparse = "off"}},
      {"gpt_sparse_off_to_on_tp", "gpt", {.sparse = "off"}, {.tp = 2, .sparse = "on", .partitions = 3}},
      // Llama: a tied head (pp = 1), and the untied table through pp and onto the sparse path.
      {"llama_tied_tp_zero_to_sp", "llama_tied", {.tp = 2, .zero = 1}, {.sp = 2}},
      {"llama_tied_dp_to_tp", "llama_tied", {}, {.tp = 2, .zero = 1}},
      {"llama_pp_to_tp_sparse", "llama", {.pp = 2}, {.tp = 2, .zero = 1, .sparse = "on", .partitions = 3}},
      // train.table_update = lazy with the table on the sparse path.
      {"gpt_lazy_sparse_P2_to_P3", "gpt", {.sparse = "on", .partitions = 2},
       {.zero = 1, .sparse = "on", .partitions = 3}, lazy},
      {"gpt_lazy_sparse_dp_to_tp", "gpt", {.sparse = "on", .partitions = 2}, {.tp = 2, .sparse = "on", .partitions = 3},
       lazy},
      {"gpt_lazy_sparse_tp_to_pp_sp", "gpt", {.tp = 2, .sparse = "on", .partitions = 3},
       {.pp = 2, .sp = 2, .sparse = "on", .partitions = 2}, lazy},
      {"gpt_lazy_sparse_to_dense_sp", "gpt", {.zero = 1, .sparse = "on", .partitions = 2}, {.sp = 2, .sparse = "off"},
       lazy},
      {"llama_lazy_sparse_tp_to_dp", "llama", {.tp = 2, .sparse = "on", .partitions = 2},
       {.zero = 1, .sparse = "on", .partitions = 3}, lazy},
      // A vocabulary of 97: the token table (and the untied head) hold 98 rows under tp = 2, 97
      // without tp. Stored in full coordinates, the table is 97 rows whatever the layout; the
      // padding row is no part of the model.
      {"gpt_vocab_padding_tp_to_pp", "gpt", {.tp = 2}, {.pp = 2}, TableUpdate::Dense, false, 97},
      {"gpt_vocab_padding_dp_to_tp_sparse", "gpt", {}, {.tp = 2, .sparse = "on", .partitions = 2}, TableUpdate::Dense,
       false, 97},
      // Experts split over ep (NOTE [Expert parallelism]): each rank saves its experts' rows of the
      // stacked weights; a resume at another ep, pp or ZeRO takes its own.
      {"llama_moe_ep2_to_pp_zero1", "llama_moe", {.ep = 2}, {.pp = 2, .zero = 1}},
      {"llama_moe_zero3_to_ep4", "llama_moe", {.zero = 3}, {.ep = 4}},
      {"llama_moe_ep4_to_ep2", "llama_moe", {.ep = 4}, {.ep = 2}},
      {"llama_moe_bias_ep2_to_pp", "llama_moe_bias", {.ep = 2}, {.pp = 2}},
      {"llama_moe_ep2_zero3_to_ep4_zero1", "llama_moe", {.zero = 3, .ep = 2}, {.zero = 1, .ep = 4}},
      {"llama_moe_ep4_zero2_to_sp_zero3", "llama_moe", {.zero = 2, .ep = 4}, {.sp = 2, .zero = 3}},
      {"llama_moe_tp2_ep2_to_ep4_zero3", "llama_moe", {.tp = 2, .ep = 2}, {.zero = 3, .ep = 4}},
      {"llama_moe_ep2_to_tp2", "llama_moe", {.ep = 2}, {.tp = 2}},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, CheckpointAcrossLayouts, ::testing::ValuesIn(across_cases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// 2. Saved by the whole world, resumed by rank 0 alone.

struct OneRankCase {
  std::string name, model;
  Layout save;
  std::string resume_sparse;
  TableUpdate update = TableUpdate::Dense;
};

void PrintTo(const OneRankCase& p, std::ostream* os) { *os << p.name; }

// Rank 0 alone (a NullCommunicator): resumes `step_dir` in the default layout, with the case's
// sparse path, and continues the serial run. A function of its own, so that an ASSERT leaves it
// and not the test body: the other ranks wait at the test's barrier.
void resume_alone(const OneRankCase& p, const Config& c, const Config& save, const std::string& step_dir) {
  Config resume = c;
  resume.parallel.sparse = p.resume_sparse;
  resume.parallel.sparse_partitions = p.resume_sparse == "on" ? 1 : 0;
  dist::NullCommunicator alone;
  const Leg resumed = run_leg(resume, alone, step_dir, 0);
  EXPECT_EQ(resumed.start_step, kStopAfter);
  EXPECT_EQ(resumed.resumed_from, step_dir);
  EXPECT_EQ(resumed.last_checkpoint, "") << "checkpoint.dir is not set in the resumed run";
  const TrainedRun want = from_step(serial_run(save), kStopAfter);
  // Alone: expect_same_training's coverage check is collective over the world. One process
  // holds every parameter whole (EXPECT_TENSOR_NEAR checks the sizes).
  ASSERT_EQ(resumed.run.records.size(), want.records.size());
  for (size_t i = 0; i < want.records.size(); ++i) {
    const double g = resumed.run.records[i].loss, w = want.records[i].loss;
    EXPECT_LE(std::abs(g - w), 1e-9 * std::abs(w)) << "step " << resumed.run.records[i].step;
    const double gn = resumed.run.records[i].grad_norm, wn = want.records[i].grad_norm;
    EXPECT_LE(std::abs(gn - wn), 1e-9 * std::abs(wn)) << "step " << resumed.run.records[i].step;
  }
  ASSERT_EQ(resumed.run.names, want.names);
  for (size_t i = 0; i < want.weights.size(); ++i) {
    SCOPED_TRACE(want.names[i]);
    EXPECT_TENSOR_NEAR(resumed.run.weights[i], want.weights[i], 1e-9);
  }
  report_differences(resumed.run, want, alone);
}

class CheckpointToOneRank : public ::testing::TestWithParam<OneRankCase> {};

TEST_P(CheckpointToOneRank, ContinuesTheSerialRunInAWorldOfOne) {
  const OneRankCase& p = GetParam();
  const int n = world().size();
  Config c = model_config(p.model);
  c.train.table_update = p.update;
  Config save = c;
  Layout layout = p.save;
  if (n % 2 != 0) layout.tp = 1;  // a world of one saves as the serial run
  if (std::string skip = apply_layout(layout, n, save); !skip.empty()) GTEST_SKIP() << skip;
  ScratchDir dir;
  save.checkpoint.dir = dir.path();
  const Leg saved = run_leg(save, world(), "", kStopAfter);
  const std::string step_dir = (fs::path(dir.path()) / ckpt::step_name(kStopAfter)).string();
  EXPECT_EQ(saved.last_checkpoint, step_dir);

  if (world().rank() == 0) {  // the others wait at the barrier
    try {
      resume_alone(p, c, save, step_dir);
    } catch (const std::exception& e) {  // this rank's alone: a failure here, then the barrier with the others
      ADD_FAILURE() << "resuming in a world of one: " << e.what();
    }
  }
  world().barrier();
}

INSTANTIATE_TEST_SUITE_P(Cases, CheckpointToOneRank,
                         ::testing::Values(OneRankCase{"gpt_sparse_zero", "gpt",
                                                       {.tp = 2, .zero = 1, .sparse = "on", .partitions = 3}, "off"},
                                           OneRankCase{"gpt_lazy_sparse", "gpt",
                                                       {.tp = 2, .sparse = "on", .partitions = 2}, "on",
                                                       TableUpdate::Lazy},
                                           OneRankCase{"llama_tied_zero", "llama_tied", {.tp = 2, .zero = 1}, "auto"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::test
