#pragma once
// The run configuration: TOML sections [model] [parallel] [memory] [train] [data] [checkpoint], with the names
// of the user-facing vocabulary (docs/config.md). Every key can be overridden with `--set section.key=value`.
// Parsing refuses unknown sections and keys (naming the closest known one) and wrongly typed values;
// `validate` refuses inconsistent values. Both throw InputError (exit 2) before anything runs.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/options.h"

namespace loom {

struct ModelConfig {
  std::string kind = "gpt";
  // 0 is written "auto": the vocabulary of the token file's sidecar (data.source = "tokens:PATH"),
  // filled in by data::resolve_vocab before the config is validated.
  int64_t vocab = 4096;
  static constexpr int64_t kVocabAuto = 0;
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t seq_len = 256;
  int64_t max_positions = 0;  // size of the learned position table; 0 = seq_len
  int64_t ffn_mult = 4;
  int64_t attn_tile = 128;    // query/key tile of the tiled attention kernel (memory is O(seq * tile))
  Option<AttnKernel> attn_kernel = AttnKernel::Fused;  // NOTE [Attention kernels]
  Option<DType> dtype = DType::Float32;
  Option<Bf16Products> bf16_products = Bf16Products::Auto;  // NOTE [bf16 products]
  // Llama (kind = "llama"): grouped-query attention with n_kv_heads key/value heads (0 = n_heads),
  // the token table reused as the LM head, the rotary base, and the SwiGLU hidden width's rounding
  // (hidden = ffn_multiple_of x ceil(2/3 x ffn_mult x d_model / ffn_multiple_of)).
  int64_t n_kv_heads = 0;
  bool tie_embeddings = false;
  double rope_theta = 10000.0;
  int64_t ffn_multiple_of = 256;
  // Mixture of experts (llama; NOTE [Mixture-of-experts block]): moe_experts > 0 makes the MLP of
  // every moe_every-th block (blocks moe_every - 1, 2 moe_every - 1, ...) a router over that many
  // SwiGLU experts of width moe_ffn_hidden (0: the dense MLP's width), moe_top_k per token, plus
  // moe_shared_experts always-on ones; the auxiliary balance loss's coefficient; a capacity factor
  // (0: dropless); the balance (NOTE [Expert balance]): "bias" adds moe_bias_rate to the choice's bias
  // of each expert that got fewer than the mean of the step's assignments, and takes it from each
  // that got more.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 2;
  int64_t moe_shared_experts = 0;
  int64_t moe_every = 1;
  int64_t moe_ffn_hidden = 0;
  Option<MoeScore> moe_score = MoeScore::Softmax;
  double moe_aux_loss_coef = 0.01;
  double moe_capacity_factor = 0.0;
  Option<MoeBalance> moe_balance = MoeBalance::Aux;
  double moe_bias_rate = 0.001;
  // DLRM (kind = "dlrm"): `tables` categorical features, each an embedding bag (sum of `bag_size`
  // rows) of a table_rows x d_model table; a bottom MLP over `dense_features` inputs with hidden
  // sizes bottom_mlp, ending in d_model; their concatenation into a top MLP (hidden sizes top_mlp)
  // ending in one logit; binary cross-entropy.
  int64_t tables = 8;
  int64_t table_rows = 1000000;
  int64_t bag_size = 1;
  int64_t dense_features = 13;
  std::vector<int64_t> bottom_mlp = {256};
  std::vector<int64_t> top_mlp = {256};
  bool operator==(const ModelConfig&) const = default;
};

struct ParallelConfig {
  int64_t dp = 1, tp = 1, pp = 1, sp = 1;
  std::string schedule = "1f1b";  // a ScheduleKind's name, or "csv:PATH"
  int64_t chunks = 1;
  std::vector<int64_t> pp_cuts;
  Option<SpMode> sp_mode = SpMode::AllGather;
  bool tp_sequence = false;
  int64_t tp_overlap = 1;
  int64_t zero = 0;
  int64_t shard_group = 0;  // ZeRO-2/3 hybrid: dp ranks per shard group (0 = all of dp)
  // Expert parallelism (NOTE [Expert parallelism]): the model.moe_experts split over groups of ep
  // consecutive dp ranks; 1 = every rank holds every expert.
  int64_t ep = 1;
  // Chunks per pipeline rank: the V's two under a V-shaped schedule kind (NOTE [V-shaped
  // pipelines]; chunks stays 1 as written), else chunks.
  int64_t stage_chunks() const { return v_shaped(schedule) ? 2 : chunks; }
  // ZeRO-2/3: the replica ranks (dp x sp) one layer's vector is sharded over: a shard group's dp
  // ranks, times sp (NOTE [Fully sharded data parallelism]).
  int64_t shard_ranks() const { return (shard_group > 0 ? shard_group : dp) * sp; }
  double bucket_mb = 25.0;
  Option<SparseMode> sparse = SparseMode::Auto;
  int64_t sparse_partitions = 0;
  Option<GradDType> grad_dtype = GradDType::Float32;
  Option<Partition> partition = Partition::Compute;
  // parallel.auto (`auto` is a C++ keyword): `loom train` plans the layout for its world size on
  // the `local` cluster (train/auto_layout.h) and replaces the layout keys with the plan's.
  bool auto_layout = false;
  Option<Backend> backend = Backend::Auto;  // NOTE [Devices]
  bool operator==(const ParallelConfig&) const = default;
};

struct MemoryConfig {
  std::string budget;  // "" = no budget, else a byte size such as "2GiB"
  Option<Recompute> recompute = Recompute::None;
  double recompute_ratio = 0.0;
  Option<Swap> swap = Swap::None;
  Option<PolicyMode> policy = PolicyMode::Manual;
  std::string profile;  // "" = analytic layer times; else a `loom profile` file (NOTE [Profile])
  bool operator==(const MemoryConfig&) const = default;
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch = 8;
  int64_t micro_batch = 4;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // cosine decay ends at lr * min_lr_ratio
  int64_t warmup = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double clip = 1.0;  // global gradient-norm limit; 0 = off
  int64_t seed = 1234;
  int64_t threads = 0;  // libtorch intra-op threads per rank; 0 = cores / ranks on this machine
  int64_t log_every = 1;
  Option<TableUpdate> table_update = TableUpdate::Dense;
  Option<TrainDevice> device = TrainDevice::Cpu;  // NOTE [Devices]
  // Validation (data.valid): a forward-only pass over a fixed set of held-out sequences every
  // eval_every steps and after the last (0 = never), of at least eval_tokens tokens (rounded up to
  // whole global batches, so every layout evaluates the same sequences).
  int64_t eval_every = 0;
  int64_t eval_tokens = 16384;
  bool operator==(const TrainConfig&) const = default;
};

struct DataConfig {
  std::string source = "synthetic";   // "synthetic" | "text:PATH" | "tokens:PATH"
  Option<TokenWidth> token_dtype = TokenWidth::Auto;  // for tokens:PATH; auto: by vocab
  double zipf = 1.05;                  // DLRM's synthetic clicks: ids follow Zipf(zipf) over each table's rows
  std::string valid;                   // held-out data, in data.source's forms; "" = none
  bool operator==(const DataConfig&) const = default;
};

// [checkpoint] (NOTE [Checkpoints], docs/checkpoint.md): "" = none.
struct CheckpointConfig {
  std::string dir;     // where step-NNNNNNN/ directories go
  int64_t every = 0;   // save every N steps (0: only at the end of the run and when it is stopped)
  int64_t keep = 2;    // complete checkpoints kept, newest first
  bool async = false;  // write in a background thread after taking a copy
  // A fresh run's starting weights: a checkpoint (`loom ckpt import`'s, or any run's) whose model
  // the run's is (NOTE [Starting from weights]); "" = the seed's initial values.
  std::string init;
  bool operator==(const CheckpointConfig&) const = default;
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  MemoryConfig memory;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  bool operator==(const Config&) const = default;

  int64_t position_count() const { return model.max_positions > 0 ? model.max_positions : model.seq_len; }
  int64_t microbatch_count() const { return train.global_batch / train.micro_batch; }
  int64_t budget_bytes() const;  // 0 = none
};

// TOML text -> Config (defaults for absent keys). `origin` names the text in errors.
Config parse_config(std::string_view toml_text, std::string_view origin);
Config load_config_file(const std::string& path);
// Applies one `section.key=value` override. A string key takes the text as it is (so
// `data.source=text:input.txt` and `memory.budget=4096` need no quotes) unless it is quoted; any
// other key reads the value as TOML, or as a string if it is not valid TOML. A value that looks like
// a number but is not one TOML can hold is refused as such (e.g. "out of range of a 64-bit integer").
// A float key, here or in a file, must be finite: TOML's inf and nan are refused.
void apply_override(Config& config, std::string_view assignment);
// Cross-key checks: shapes divide, sizes are positive and their products fit 64 bits, names are known.
void validate(const Config& config);
// Settings that are legal but most likely not what the user meant (e.g. a warmup that outlasts the
// run), as texts without a prefix; empty when there is nothing to say. Pure: the caller prints them.
// Meant for a config that passed `validate`.
std::vector<std::string> config_warnings(const Config& config);
// The effective configuration as TOML, every key present.
std::string to_toml(const Config& config);
// The same, with only the keys ("section.name") `show` accepts.
std::string to_toml(const Config& config, const std::function<bool(const std::string& key)>& show);
// Every key ("section.key") with its value as TOML writes it, in the order of the key table.
std::vector<std::pair<std::string, std::string>> config_values(const Config& config);

// All keys as "section.key", for suggestions and documentation.
std::vector<std::string> config_keys();
// The sections ("model", "parallel", ...) in the order of the keys.
std::vector<std::string_view> config_sections();

}  // namespace loom
