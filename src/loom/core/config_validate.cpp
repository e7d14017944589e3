// Cross-key validation of a Config: everything that can be known wrong before a rank allocates;
// and the warnings for settings that are legal but most likely not meant.
#include <fmt/ranges.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "loom/core/checks.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/units.h"

namespace loom {
namespace {





// NOTE [Fully sharded data parallelism]: the shard groups cut dp evenly; what ZeRO-2/3 do not run
// with yet is refused here.
void validate_sharding(const ParallelConfig& p) {
  LOOM_CHECK_INPUT(p.shard_group >= 0, "parallel.shard_group = {} must be >= 0 (0 = every dp rank)", p.shard_group);
  if (p.shard_group == 0) return;
  LOOM_CHECK_INPUT(p.zero >= 2,
                   "parallel.shard_group = {} shards within groups of dp ranks, which only parallel.zero = 2 or 3 "
                   "does (it is {}); hint: set parallel.zero = 3, or drop parallel.shard_group",
                   p.shard_group, p.zero);
  LOOM_CHECK_INPUT(p.dp % p.shard_group == 0,
                   "parallel.shard_group = {} must divide parallel.dp = {}: the dp ranks form equal groups that each "
                   "hold one copy of the shards; hint: a divisor of {}, e.g. {}",
                   p.shard_group, p.dp, p.dp, p.dp % 2 == 0 ? p.dp / 2 : 1);
}

void validate_parallel(const ParallelConfig& p) {
  for (auto [key, value] : {std::pair{"parallel.dp", p.dp}, {"parallel.tp", p.tp}, {"parallel.pp", p.pp},
                            {"parallel.sp", p.sp}, {"parallel.chunks", p.chunks}, {"parallel.ep", p.ep},
                            {"parallel.tp_overlap", p.tp_overlap}})
    check_positive(key, value);
  if (!(p.schedule.starts_with("csv:") && p.schedule.size() > 4))
    option_from<ScheduleKind>("parallel.schedule", p.schedule);
  LOOM_CHECK_INPUT(p.zero >= 0 && p.zero <= 3,
                   "parallel.zero = {} must be 0 (replicated), 1 (optimizer state sharded), 2 (and gradients) or 3 "
                   "(and parameters)",
                   p.zero);
  validate_sharding(p);
  LOOM_CHECK_INPUT(p.bucket_mb > 0, "parallel.bucket_mb = {} must be positive", p.bucket_mb);
  LOOM_CHECK_INPUT(p.bucket_mb < 0x1p43,
                   "parallel.bucket_mb = {} is too large: a bucket's bytes must stay below 2^63 (8 EiB); hint: any "
                   "size above the model's gradients makes one bucket, e.g. 1024",
                   p.bucket_mb);
  // MPI numbers ranks with an int.
  check_product("the ranks of the layout",
                {{"parallel.dp", p.dp}, {"parallel.tp", p.tp}, {"parallel.pp", p.pp}, {"parallel.sp", p.sp}},
                std::numeric_limits<int>::max(), "2147483647 ranks (MPI counts them with an int)");
  check_product("the pipeline's stage chunks", {{"parallel.pp", p.pp}, {"parallel.chunks", p.chunks}},
                std::numeric_limits<int>::max(), "2147483647 (an int)");
  LOOM_CHECK_INPUT(p.sparse_partitions >= 0, "parallel.sparse_partitions = {} must be >= 0 (0 = automatic)",
                   p.sparse_partitions);

  LOOM_CHECK_INPUT(p.chunks == 1 || !v_shaped(p.schedule),
                   "parallel.schedule = \"{}\" places two chunks per rank in a V by itself; parallel.chunks = {} "
                   "cannot be given with it; hint: leave parallel.chunks out",
                   p.schedule, p.chunks);
  LOOM_CHECK_INPUT(p.chunks == 1 || p.schedule == name_of(ScheduleKind::Interleaved) || p.schedule.starts_with("csv:"),
                   "parallel.chunks = {} needs parallel.schedule = \"interleaved\" (or a CSV schedule); \"{}\" "
                   "runs one chunk per rank",
                   p.chunks, p.schedule);
  LOOM_CHECK_INPUT(p.chunks == 1 || p.pp > 1, "parallel.chunks = {} needs pipeline stages (parallel.pp > 1)",
                   p.chunks);
}



// parallel.auto chooses the degrees and the cuts: ones the user wrote would be silently replaced.
void validate_auto_layout(const ParallelConfig& p) {
  if (!p.auto_layout) return;
  std::vector<std::string> set;
  for (auto [key, value] : {std::pair{"parallel.dp", p.dp}, {"parallel.tp", p.tp}, {"parallel.pp", p.pp},
                            {"parallel.sp", p.sp}, {"parallel.ep", p.ep}})
    if (value != 1) set.push_back(fmt::format("{} = {}", key, value));
  if (!p.pp_cuts.empty()) set.push_back(fmt::format("parallel.pp_cuts = [{}]", fmt::join(p.pp_cuts, ", ")));
  LOOM_CHECK_INPUT(set.empty(),
                   "parallel.auto = true chooses the layout, but the config also sets {}: they conflict; hint: drop "
                   "{}, or set parallel.auto = false to run the layout as written",
                   fmt::join(set, ", "), set.size() == 1 ? "it" : "them");
}

void validate_common_model(const ModelConfig& m) {
  LOOM_CHECK_INPUT(!m.kind.empty(), "model.kind is empty; name a model kind (`loom config --print` shows the default)");
}

void validate_memory(const MemoryConfig& m, const ParallelConfig& p) {
  if (!m.budget.empty()) {
    const int64_t budget = parse_bytes(m.budget, "memory.budget");
    LOOM_CHECK_INPUT(budget > 0, "memory.budget = \"{}\" must be positive (or \"\" for none)", m.budget);
  }
  LOOM_CHECK_INPUT(m.recompute_ratio >= 0 && m.recompute_ratio <= 1,
                   "memory.recompute_ratio = {} must be in [0, 1]", m.recompute_ratio);
  LOOM_CHECK_INPUT(m.recompute != Recompute::StageAware || p.pp > 1,
                   "memory.recompute = \"stage-aware\" needs pipeline stages (parallel.pp > 1); use \"full\" "
                   "or \"none\" in one process");
  LOOM_CHECK_INPUT(m.policy == PolicyMode::Manual || (m.recompute == Recompute::None && m.swap == Swap::None),
                   "memory.policy = \"auto\" chooses keep, recompute or swap per layer, so memory.recompute = \"{}\" "
                   "and memory.swap = \"{}\" would be ignored; hint: leave them at \"none\" or set memory.policy = "
                   "\"manual\"",
                   m.recompute.name(), m.swap.name());
  LOOM_CHECK_INPUT(m.policy == PolicyMode::Manual || !m.budget.empty(),
                   "memory.policy = \"auto\" fits each stage into memory.budget, which is not set; hint: set "
                   "memory.budget (e.g. \"2GiB\")");
  LOOM_CHECK_INPUT(p.partition != Partition::Auto || !m.budget.empty(),
                   "parallel.partition = \"auto\" searches for the fastest cut that fits memory.budget, which is not "
                   "set; hint: set memory.budget, or use \"memory\" to balance memory");
  LOOM_CHECK_INPUT(p.partition == Partition::Compute || p.stage_chunks() == 1,
                   "parallel.partition = \"{}\" cuts one slice per pipeline rank, but the schedule runs {} chunks "
                   "per rank; hint: use \"compute\" with interleaved and V-shaped schedules",
                   p.partition.name(), p.stage_chunks());
  LOOM_CHECK_INPUT(p.partition == Partition::Compute || p.pp_cuts.empty(),
                   "parallel.partition = \"{}\" searches the stage cuts, which parallel.pp_cuts fixes; hint: drop "
                   "one of the two",
                   p.partition.name());
}

void validate_train(const TrainConfig& t) {
  for (auto [key, value] : {std::pair{"train.steps", t.steps}, {"train.global_batch", t.global_batch},
                            {"train.micro_batch", t.micro_batch}, {"train.log_every", t.log_every}})
    check_positive(key, value);
  LOOM_CHECK_INPUT(t.global_batch % t.micro_batch == 0,
                   "train.global_batch ({}) must be a multiple of train.micro_batch ({})", t.global_batch,
                   t.micro_batch);
  LOOM_CHECK_INPUT(t.lr > 0, "train.lr = {} must be positive", t.lr);
  LOOM_CHECK_INPUT(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1, "train.min_lr_ratio = {} must be in [0, 1]",
                   t.min_lr_ratio);
  LOOM_CHECK_INPUT(t.warmup >= 0, "train.warmup = {} must be >= 0", t.warmup);
  LOOM_CHECK_INPUT(t.weight_decay >= 0, "train.weight_decay = {} must be >= 0", t.weight_decay);
  LOOM_CHECK_INPUT(t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1,
                   "train.beta1 ({}) and train.beta2 ({}) must be in [0, 1)", t.beta1, t.beta2);
  LOOM_CHECK_INPUT(t.clip >= 0, "train.clip = {} must be >= 0 (0 = no clipping)", t.clip);
  LOOM_CHECK_INPUT(t.seed >= 0, "train.seed = {} must be >= 0", t.seed);
  LOOM_CHECK_INPUT(t.eval_every >= 0, "train.eval_every = {} must be >= 0 (0 = never validate)", t.eval_every);
  check_positive("train.eval_tokens", t.eval_tokens);
  LOOM_CHECK_INPUT(t.threads >= 0 && t.threads <= std::numeric_limits<int>::max(),
                   "train.threads = {} must be in [0, 2147483647] (0 = automatic: the cores / the ranks on this "
                   "machine)",
                   t.threads);
}

// data.valid takes data.source's forms; the validation pass needs both it and train.eval_every.
void validate_validation(const Config& c) {
  const std::string& v = c.data.valid;
  LOOM_CHECK_INPUT(v.empty() || v == "synthetic" || (v.find(':') != std::string::npos && v.find(':') + 1 < v.size()),
                   "data.valid = \"{}\" is not a data source; hint: \"tokens:PATH\" (e.g. the validation split of "
                   "`loom data prepare --valid-fraction`), \"text:PATH\" or \"synthetic\"",
                   v);
  LOOM_CHECK_INPUT(v.empty() || v == "synthetic" || v != c.data.source,  // "synthetic": other samples
                   "data.valid = \"{}\" is the training data itself (data.source): a validation loss on it measures "
                   "nothing held out; hint: `loom data prepare --valid-fraction 0.01` writes a separate split",
                   v);
  LOOM_CHECK_INPUT(c.train.eval_every == 0 || !v.empty(),
                   "train.eval_every = {} needs held-out data: data.valid is empty; hint: set data.valid = "
                   "\"tokens:PATH\" or train.eval_every = 0",
                   c.train.eval_every);
}

// model.vocab = "auto" is replaced by the token file's vocabulary (data::resolve_vocab) before
// validation; one still at 0 here had no token file to read it from.
void validate_vocab(const Config& c) {
  LOOM_CHECK_INPUT(c.model.vocab != ModelConfig::kVocabAuto,
                   "model.vocab = \"auto\" reads the vocabulary from a token file's sidecar, but data.source = \"{}\" "
                   "is not a token file; hint: data.source = \"tokens:PATH\" (written by `loom data prepare`), or "
                   "give model.vocab as a number",
                   c.data.source);
}

void validate_checkpoint(const CheckpointConfig& c) {
  LOOM_CHECK_INPUT(c.every >= 0, "checkpoint.every = {} must be >= 0 (0 = save only at the end of the run and when "
                   "it is stopped)", c.every);
  LOOM_CHECK_INPUT(c.keep >= 1, "checkpoint.keep = {} must be >= 1: the newest complete checkpoint is always kept",
                   c.keep);
}

// The global batch splits into micro-batches, and the micro-batches evenly over dp ranks.
void validate_batch_split(const TrainConfig& t, const ParallelConfig& p) {
  const int64_t micro_batches = t.global_batch / t.micro_batch;
  LOOM_CHECK_INPUT(micro_batches % p.dp == 0,
                   "parallel.dp ({}) must divide the micro-batches of a step (train.global_batch {} / "
                   "train.micro_batch {} = {}); hint: make global_batch a multiple of micro_batch * dp = {}",
                   p.dp, t.global_batch, t.micro_batch, micro_batches, t.micro_batch * p.dp);
}


}  // namespace

void validate(const Config& config) {
  // Each section alone, then the sizes of the run (NOTE [Sizes that fit]), then across sections.
  // The model kind's own checks (its keys, sizes and the layouts it supports) follow in
  // models::validate_config.
  validate_common_model(config.model);
  validate_vocab(config);
  validate_validation(config);
  validate_parallel(config.parallel);
  validate_auto_layout(config.parallel);
  // NOTE [Expert parallelism]: groups of ep dp ranks, each holding a share of every block's experts.
  LOOM_CHECK_INPUT(config.parallel.ep == 1 || config.model.moe_experts > 0,
                   "parallel.ep = {} splits the experts over dp ranks, but model.moe_experts = 0; hint: parallel.ep = 1",
                   config.parallel.ep);
  LOOM_CHECK_INPUT(config.parallel.dp % config.parallel.ep == 0,
                   "parallel.ep = {} must divide parallel.dp = {}: the experts are split over groups of ep "
                   "consecutive dp ranks; hint: a divisor of {}",
                   config.parallel.ep, config.parallel.dp, config.parallel.dp);
  validate_memory(config.memory, config.parallel);
  validate_train(config.train);
  validate_checkpoint(config.checkpoint);
  check_product("the samples of the run",
                {{"train.steps", config.train.steps}, {"train.global_batch", config.train.global_batch}});
  validate_batch_split(config.train, config.parallel);
  LOOM_CHECK_INPUT(config.parallel.grad_dtype == GradDType::Float32 || config.model.dtype == DType::BFloat16,
                   "parallel.grad_dtype = \"{}\" needs model.dtype = \"bfloat16\" (it is \"{}\"): a {} model "
                   "reduces its gradients in its own dtype; hint: drop parallel.grad_dtype, or train in bfloat16",
                   config.parallel.grad_dtype.name(), config.model.dtype.name(), config.model.dtype.name());
  LOOM_CHECK_INPUT(config.parallel.backend != Backend::Nccl || config.train.device != TrainDevice::Cpu,
                   "parallel.backend = \"nccl\" carries GPU tensors, but train.device = \"cpu\"; hint: "
                   "train.device = \"cuda\" (or \"auto\"), or parallel.backend = \"mpi\" (or \"auto\")");
  LOOM_CHECK_INPUT(config.parallel.zero < 2 || !config.parallel.tp_sequence,
                   "parallel.zero = {} does not run with parallel.tp_sequence = true yet (its norms' partial "
                   "gradients are summed over tp after the last micro-batch, when ZeRO-2/3 have already reduced "
                   "them); hint: parallel.zero = 1, or parallel.tp_sequence = false",
                   config.parallel.zero);
  // A table on the sparse path updates its looked-up rows on its owners; a dense one finds them in
  // its whole value (NOTE [Lazy rows of dense tables]), which ZeRO-3 never keeps.
  const bool dense_tables = config.parallel.sparse != SparseMode::On || config.model.tie_embeddings;
  LOOM_CHECK_INPUT(config.parallel.zero < 3 || config.train.table_update == TableUpdate::Dense || !dense_tables,
                   "parallel.zero = 3 does not run train.table_update = \"lazy\" on a dense embedding table yet "
                   "(parallel.sparse = \"{}\"{}); hint: parallel.zero = 2, train.table_update = \"dense\", or "
                   "parallel.sparse = \"on\" with untied tables",
                   config.parallel.sparse.name(), config.model.tie_embeddings ? ", model.tie_embeddings = true" : "");
  LOOM_CHECK_INPUT(config.train.micro_batch % config.parallel.tp_overlap == 0,
                   "[tp] parallel.tp_overlap ({}) must divide train.micro_batch ({}): each micro-batch is cut into "
                   "tp_overlap equal chunks",
                   config.parallel.tp_overlap, config.train.micro_batch);
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> warnings;
  const TrainConfig& t = config.train;
  if (t.warmup > 0 && t.warmup >= t.steps) {
    // The schedule warms up linearly over `warmup` steps: lr * (step + 1) / warmup (optim/lr_schedule).
    const double last = t.lr * static_cast<double>(t.steps) / static_cast<double>(t.warmup);
    warnings.push_back(fmt::format(
        "train.warmup ({}) >= train.steps ({}): the learning rate rises for the whole run and never decays; it "
        "ends at {:g}, {} train.lr = {:g}; hint: warm up for a few percent of the run, e.g. train.warmup = {}",
        t.warmup, t.steps, last, t.warmup > t.steps ? "never reaching" : "only at the last step reaching", t.lr,
        t.steps / 20));
  }
  if (!config.data.valid.empty() && t.eval_every == 0)
    warnings.push_back(fmt::format("data.valid = \"{}\" is set, but train.eval_every = 0: it is never read; hint: "
                                   "train.eval_every = N validates every N steps and after the last",
                                   config.data.valid));
  const CheckpointConfig& c = config.checkpoint;
  if (c.dir.empty() && (c.every > 0 || c.async))  // an empty dir turns checkpoints off, as a --set may mean to
    warnings.push_back(fmt::format("checkpoint.dir is empty, so no checkpoint is written (checkpoint.every = {}{} "
                                   "has no effect); hint: checkpoint.dir = \"PATH\" to save them",
                                   c.every, c.async ? ", async = true" : ""));
  if (t.weight_decay > 1) {
    warnings.push_back(fmt::format(
        "train.weight_decay = {:g} is unusually large: each step multiplies every decayed weight by 1 - train.lr x "
        "weight_decay = {:g} at the peak learning rate; hint: 0 to 0.1 is usual",
        t.weight_decay, 1 - t.lr * t.weight_decay));
  }
  return warnings;
}

}  // namespace loom
