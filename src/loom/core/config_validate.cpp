// Cross-key validation of a Config: everything that can be known wrong before a rank allocates;
// and the warnings for settings that are legal but most likely not meant.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/units.h"

namespace loom {
namespace {

template <size_t N>
void check_one_of(std::string_view key, const std::string& value, const std::array<std::string_view, N>& allowed) {
  LOOM_CHECK_INPUT(std::find(allowed.begin(), allowed.end(), value) != allowed.end(),
                   "{} = \"{}\" is not one of: {}", key, value, fmt::join(allowed, ", "));
}

void check_positive(std::string_view key, int64_t value) {
  LOOM_CHECK_INPUT(value > 0, "{} = {} must be positive", key, value);
}

// NOTE [Sizes that fit]
// Sizes multiply: the token table is vocab x d_model elements, a micro-batch's logits micro_batch x
// seq_len x vocab. Every such product must fit the int64 arithmetic of shapes and byte counts (up to
// 8 bytes an element), or later code computes with a wrapped number instead of refusing; 2^60 leaves
// that room. Whether the memory exists is the budget's and the allocator's question, not this one.
constexpr int64_t kMaxCount = int64_t{1} << 60;

struct Factor {
  std::string key;
  int64_t value;
};

// Refuses `what`, the product of positive `factors`, above `limit` (named `limit_text`).
void check_product(std::string_view what, const std::vector<Factor>& factors, int64_t limit = kMaxCount,
                   std::string_view limit_text = "2^60, what loom's 64-bit sizes and byte counts hold") {
  int64_t product = 1;
  bool overflow = false;
  for (const auto& f : factors) overflow = overflow || __builtin_mul_overflow(product, f.value, &product);
  if (!overflow && product <= limit) return;
  std::vector<std::string> terms;
  for (const auto& f : factors) terms.push_back(fmt::format("{} {}", f.key, f.value));
  throw InputError(fmt::format("{} ({}) comes to {}; the limit is {}; hint: make one of these smaller", what,
                               fmt::join(terms, " x "), overflow ? "more than 2^63" : fmt::format("{}", product),
                               limit_text));
}

// Each weight of an MLP of hidden `sizes` (named `key`) over `input` features.
void check_mlp(std::string_view key, const std::vector<int64_t>& sizes, Factor input) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Factor out{fmt::format("{}[{}]", key, i), sizes[i]};
    check_product(fmt::format("the weight of {}", out.key), {input, out});
    input = out;
  }
}

// The largest tensors of one micro-batch and of the model, and the sample count of the run.
void validate_sizes(const Config& c) {
  const ModelConfig& m = c.model;
  const Factor d_model{"model.d_model", m.d_model}, micro_batch{"train.micro_batch", c.train.micro_batch};
  if (m.kind == "dlrm") {
    check_product("the embedding tables", {{"model.tables", m.tables}, {"model.table_rows", m.table_rows}, d_model});
    check_product("a micro-batch's ids", {micro_batch, {"model.tables", m.tables}, {"model.bag_size", m.bag_size}});
    check_mlp("model.bottom_mlp", m.bottom_mlp, {"model.dense_features", m.dense_features});
    check_mlp("model.top_mlp", m.top_mlp,
              {"its input width (model.tables + 1) x model.d_model", (m.tables + 1) * m.d_model});
  } else {
    const Factor vocab{"model.vocab", m.vocab}, seq_len{"model.seq_len", m.seq_len};
    const Factor ffn{"model.ffn_mult", m.ffn_mult};
    check_product("the token table", {vocab, d_model});
    check_product("the position table", {{m.max_positions > 0 ? "model.max_positions" : "model.seq_len",
                                          c.position_count()},
                                         d_model});
    check_product("the MLP weights of all blocks", {{"model.n_layers", m.n_layers}, ffn, d_model, d_model});
    check_product("a micro-batch's logits", {micro_batch, seq_len, vocab});
    check_product("a micro-batch's MLP activations", {micro_batch, seq_len, ffn, d_model});
    check_product("a micro-batch's attention scores tile",
                  {micro_batch, {"model.n_heads", m.n_heads}, seq_len, {"model.attn_tile", m.attn_tile}});
  }
  check_product("the samples of the run",
                {{"train.steps", c.train.steps}, {"train.global_batch", c.train.global_batch}});
}

void validate_model(const ModelConfig& m, int64_t positions) {
  check_one_of("model.kind", m.kind, std::array<std::string_view, 2>{"gpt", "dlrm"});
  check_one_of("model.dtype", m.dtype, std::array<std::string_view, 3>{"float32", "float64", "bfloat16"});
  LOOM_CHECK_INPUT(m.dtype != "bfloat16",
                   "model.dtype = \"bfloat16\" is not supported by the CPU kernels yet; use \"float32\" "
                   "(training) or \"float64\" (equivalence checks)");
  if (m.kind == "dlrm") {
    for (auto [key, value] : {std::pair{"model.d_model", m.d_model}, {"model.tables", m.tables},
                              {"model.table_rows", m.table_rows}, {"model.bag_size", m.bag_size},
                              {"model.dense_features", m.dense_features}})
      check_positive(key, value);
    for (auto [key, sizes] : {std::pair{"model.bottom_mlp", &m.bottom_mlp}, {"model.top_mlp", &m.top_mlp}})
      for (int64_t size : *sizes)
        LOOM_CHECK_INPUT(size > 0, "{} = [{}]: every hidden size must be positive", key, fmt::join(*sizes, ", "));
    return;
  }
  LOOM_CHECK_INPUT(m.vocab >= 2, "model.vocab = {} must be at least 2", m.vocab);
  for (auto [key, value] : {std::pair{"model.d_model", m.d_model}, {"model.n_layers", m.n_layers},
                            {"model.n_heads", m.n_heads}, {"model.seq_len", m.seq_len},
                            {"model.ffn_mult", m.ffn_mult}, {"model.attn_tile", m.attn_tile}})
    check_positive(key, value);
  LOOM_CHECK_INPUT(m.d_model % m.n_heads == 0,
                   "model.d_model ({}) must be divisible by model.n_heads ({}); hint: d_model = {} or {} fits",
                   m.d_model, m.n_heads, std::max(m.n_heads, m.d_model / m.n_heads * m.n_heads),
                   (m.d_model / m.n_heads + 1) * m.n_heads);
  LOOM_CHECK_INPUT(m.max_positions >= 0, "model.max_positions = {} must be >= 0 (0 = seq_len)", m.max_positions);
  LOOM_CHECK_INPUT(m.seq_len <= positions,
                   "model.seq_len ({}) is longer than the position table (model.max_positions = {}); "
                   "hint: raise max_positions or shorten seq_len",
                   m.seq_len, positions);
}

// A DLRM trains with data parallelism only (its tables shard over dp on the sparse path).
void validate_dlrm_layout(const ModelConfig& m, const ParallelConfig& p, const DataConfig& d) {
  if (m.kind != "dlrm") return;
  LOOM_CHECK_INPUT(p.tp == 1 && p.pp == 1 && p.sp == 1,
                   "model.kind = \"dlrm\" trains with data parallelism only: parallel.tp ({}), pp ({}) and sp ({}) "
                   "must be 1; hint: raise parallel.dp instead",
                   p.tp, p.pp, p.sp);
  LOOM_CHECK_INPUT(d.source == "synthetic" || (d.source.starts_with("clicks:") && d.source.size() > 7),
                   "model.kind = \"dlrm\" reads click data: data.source = \"synthetic\" or \"clicks:PATH\", not \"{}\"",
                   d.source);
  LOOM_CHECK_INPUT(std::isfinite(d.zipf) && d.zipf > 0,
                   "data.zipf = {} must be a positive number (the Zipf exponent of the click ids)", d.zipf);
}

// The rows of one sparse table on one rank: DLRM's table_rows, or the GPT's vocabulary shard.
int64_t sparse_table_rows(const ModelConfig& m, const ParallelConfig& p) {
  return m.kind == "dlrm" ? m.table_rows : (m.vocab + p.tp - 1) / p.tp;
}

void validate_parallel(const ParallelConfig& p) {
  for (auto [key, value] : {std::pair{"parallel.dp", p.dp}, {"parallel.tp", p.tp}, {"parallel.pp", p.pp},
                            {"parallel.sp", p.sp}, {"parallel.chunks", p.chunks},
                            {"parallel.tp_overlap", p.tp_overlap}})
    check_positive(key, value);
  if (!(p.schedule.starts_with("csv:") && p.schedule.size() > 4))
    check_one_of("parallel.schedule", p.schedule,
                 std::array<std::string_view, 5>{"gpipe", "1f1b", "interleaved", "zb-h1", "scp"});
  check_one_of("parallel.sp_mode", p.sp_mode, std::array<std::string_view, 3>{"allgather", "ring", "ulysses"});
  check_one_of("parallel.sparse", p.sparse, std::array<std::string_view, 2>{"auto", "off"});
  LOOM_CHECK_INPUT(p.zero == 0 || p.zero == 1, "parallel.zero = {} must be 0 or 1", p.zero);
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

  LOOM_CHECK_INPUT(p.chunks == 1 || p.schedule == "interleaved" || p.schedule.starts_with("csv:"),
                   "parallel.chunks = {} needs parallel.schedule = \"interleaved\" (or a CSV schedule); \"{}\" "
                   "runs one chunk per rank",
                   p.chunks, p.schedule);
  LOOM_CHECK_INPUT(p.chunks == 1 || p.pp > 1, "parallel.chunks = {} needs pipeline stages (parallel.pp > 1)",
                   p.chunks);
}

void validate_pipeline(const ModelConfig& m, const ParallelConfig& p, const MemoryConfig& mem) {
  LOOM_CHECK_INPUT(mem.recompute != "stage-aware" || p.pp > 1,
                   "memory.recompute = \"stage-aware\" needs pipeline stages (parallel.pp > 1); use \"full\" "
                   "or \"none\" in one process");
  LOOM_CHECK_INPUT(p.chunks == 1 || !p.pp_cuts.empty() || m.n_layers % p.chunks == 0,
                   "parallel.chunks = {} must divide model.n_layers ({}) so that every chunk holds whole "
                   "transformer blocks' worth of layers; hint: change chunks or give parallel.pp_cuts",
                   p.chunks, m.n_layers);
}

void validate_tensor_parallel(const ModelConfig& m, const ParallelConfig& p, const TrainConfig& t) {
  LOOM_CHECK_INPUT(t.micro_batch % p.tp_overlap == 0,
                   "[tp] parallel.tp_overlap ({}) must divide train.micro_batch ({}): each micro-batch is cut into "
                   "tp_overlap equal chunks",
                   p.tp_overlap, t.micro_batch);
  LOOM_CHECK_INPUT(p.sp == 1 || p.sp_mode != "ring" || m.seq_len % (2 * p.sp) == 0,
                   "[sp] sp_mode = \"ring\" cuts the sequence into 2 x parallel.sp chunks (each rank holds one early "
                   "and one late, to balance the causal work): model.seq_len ({}) must be divisible by {}",
                   m.seq_len, 2 * p.sp);
  LOOM_CHECK_INPUT(m.seq_len % p.sp == 0,
                   "[sp] model.seq_len ({}) must be divisible by parallel.sp ({}): each sp rank holds one equal "
                   "segment of every sequence",
                   m.seq_len, p.sp);
  LOOM_CHECK_INPUT(p.sp == 1 || !p.tp_sequence || m.seq_len / p.sp % p.tp == 0,
                   "[tp] parallel.tp_sequence needs each sp segment (model.seq_len {} / parallel.sp {}) divisible by "
                   "parallel.tp ({})",
                   m.seq_len, p.sp, p.tp);
  LOOM_CHECK_INPUT(!p.tp_sequence || m.seq_len % p.tp == 0,
                   "[tp] parallel.tp_sequence needs model.seq_len ({}) divisible by parallel.tp ({}): each tp rank "
                   "holds seq_len / tp tokens of the norm regions; hint: change seq_len or turn tp_sequence off",
                   m.seq_len, p.tp);
  LOOM_CHECK_INPUT(m.n_heads % p.tp == 0, "[tp] model.n_heads ({}) must be divisible by parallel.tp ({})", m.n_heads,
                   p.tp);
  LOOM_CHECK_INPUT(p.sp == 1 || p.sp_mode != "ulysses" || m.n_heads % (p.tp * p.sp) == 0,
                   "[sp] sp_mode = \"ulysses\" splits the heads over sp: model.n_heads ({}) must be divisible by "
                   "parallel.tp x parallel.sp ({} x {}); hint: sp_mode = \"allgather\" has no such limit",
                   m.n_heads, p.tp, p.sp);
  LOOM_CHECK_INPUT(m.ffn_mult * m.d_model % p.tp == 0,
                   "[tp] the MLP's hidden size (model.ffn_mult {} x model.d_model {} = {}) must be divisible by "
                   "parallel.tp ({})",
                   m.ffn_mult, m.d_model, m.ffn_mult * m.d_model, p.tp);
}

void validate_memory(const MemoryConfig& m) {
  if (!m.budget.empty()) {
    const int64_t budget = parse_bytes(m.budget, "memory.budget");
    LOOM_CHECK_INPUT(budget > 0, "memory.budget = \"{}\" must be positive (or \"\" for none)", m.budget);
  }
  check_one_of("memory.recompute", m.recompute, std::array<std::string_view, 3>{"none", "full", "stage-aware"});
  LOOM_CHECK_INPUT(m.recompute_ratio >= 0 && m.recompute_ratio <= 1,
                   "memory.recompute_ratio = {} must be in [0, 1]", m.recompute_ratio);
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
  LOOM_CHECK_INPUT(t.threads >= 0 && t.threads <= std::numeric_limits<int>::max(),
                   "train.threads = {} must be in [0, 2147483647] (0 = automatic: the cores / the ranks on this "
                   "machine)",
                   t.threads);
}

// The global batch splits into micro-batches, and the micro-batches evenly over dp ranks.
void validate_batch_split(const TrainConfig& t, const ParallelConfig& p) {
  const int64_t micro_batches = t.global_batch / t.micro_batch;
  LOOM_CHECK_INPUT(micro_batches % p.dp == 0,
                   "parallel.dp ({}) must divide the micro-batches of a step (train.global_batch {} / "
                   "train.micro_batch {} = {}); hint: make global_batch a multiple of micro_batch * dp = {}",
                   p.dp, t.global_batch, t.micro_batch, micro_batches, t.micro_batch * p.dp);
}

void validate_data(const DataConfig& d, const ModelConfig& m) {
  const std::string& s = d.source;
  if (m.kind == "dlrm") return;  // its sources: validate_dlrm_layout
  const bool known = s == "synthetic" || (s.starts_with("text:") && s.size() > 5) ||
                     (s.starts_with("tokens:") && s.size() > 7);
  LOOM_CHECK_INPUT(known, "data.source = \"{}\" is not \"synthetic\", \"text:PATH\" or \"tokens:PATH\"", s);
  check_one_of("data.token_dtype", d.token_dtype, std::array<std::string_view, 3>{"auto", "uint16", "uint32"});
  LOOM_CHECK_INPUT(!s.starts_with("text:") || m.vocab >= 256,
                   "data.source = \"{}\" is byte-level text, which needs model.vocab >= 256 (got {})", s, m.vocab);
}

}  // namespace

void validate(const Config& config) {
  // Each section alone, then the products of its sizes (NOTE [Sizes that fit]), then across sections.
  validate_model(config.model, config.position_count());
  validate_parallel(config.parallel);
  validate_memory(config.memory);
  validate_train(config.train);
  validate_sizes(config);
  validate_dlrm_layout(config.model, config.parallel, config.data);
  const int64_t rows = sparse_table_rows(config.model, config.parallel);
  LOOM_CHECK_INPUT(config.parallel.sparse_partitions <= rows,
                   "parallel.sparse_partitions = {} is more than the {} rows of {} to partition; hint: at most {}, "
                   "or 0 to choose automatically",
                   config.parallel.sparse_partitions, rows,
                   config.model.kind == "dlrm" ? "each table" : "the token table (per tp rank)", rows);
  validate_tensor_parallel(config.model, config.parallel, config.train);
  validate_pipeline(config.model, config.parallel, config.memory);
  validate_batch_split(config.train, config.parallel);
  validate_data(config.data, config.model);
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
  if (t.weight_decay > 1) {
    warnings.push_back(fmt::format(
        "train.weight_decay = {:g} is unusually large: each step multiplies every decayed weight by 1 - train.lr x "
        "weight_decay = {:g} at the peak learning rate; hint: 0 to 0.1 is usual",
        t.weight_decay, 1 - t.lr * t.weight_decay));
  }
  return warnings;
}

}  // namespace loom
