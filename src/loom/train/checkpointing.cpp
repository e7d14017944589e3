// The trainer's checkpoints (NOTE [Checkpoints], NOTE [Resuming]): what a checkpoint says about
// the run besides its tensors, which config keys a resumed run may change, saving and restoring.
#include <fmt/ranges.h>
#include <chrono>
#include <filesystem>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/core/error.h"
#include "loom/dist/gather_text.h"
#include "loom/optim/lr_schedule.h"
#include "loom/train/trainer.h"
#include "loom/version.h"

namespace loom::train {
namespace {

// NOTE [Resuming]
// A resumed run continues the saved one: micro-batch i of step s is the same samples in every
// layout (data::Batches), initial values and data order come from the seed, the LR schedule is a
// function of the step, so the step, the weights and the optimizer state are the whole state.
// The model must be the same and so must what decides the data (the seed, the global batch); the
// layout (parallel.*), memory policy, micro-batch size, threads, logging, checkpoint keys and
// train.steps may differ (a longer run resumes a shorter one; the cosine then spans the new
// length). Other train and data keys may change with a warning: the run is then no longer the
// one that was saved (a new learning rate, other data). model.dtype may change between the types
// whose weights are float32 and float64 with a warning (the stored values are converted), and
// model.bf16_products freely (how the resuming machine multiplies, not the model).
bool must_match(const std::string& key) {
  return (key.starts_with("model.") && key != "model.dtype" && key != "model.bf16_products") || key == "train.seed" ||
         key == "train.global_batch";
}

bool free_to_change(const std::string& key) {
  return key.starts_with("parallel.") || key.starts_with("memory.") || key.starts_with("checkpoint.") ||
         key == "train.steps" || key == "train.micro_batch" || key == "train.threads" || key == "train.log_every" ||
         key == "train.device" || key == "model.bf16_products";  // how this machine multiplies: NOTE [bf16 products]
}

}  // namespace

// --resume: "auto" (the latest complete checkpoint of checkpoint.dir, or a fresh start) or a
// checkpoint's directory. Everything that can be checked without allocating: the manifest, the
// files' sizes, the config against this run's.
void Trainer::check_resume(const std::string& spec) {
  const std::string& own = config_.checkpoint.dir;  // NOTE [A checkpoint folder belongs to one run]
  if (spec.empty()) {
    if (!own.empty()) ckpt::check_dir_for_run(own, std::nullopt);
    return;
  }
  std::string dir = spec;
  if (spec == "auto") {
    LOOM_CHECK_INPUT(!config_.checkpoint.dir.empty(), "--resume auto needs checkpoint.dir (it is empty); hint: "
                     "--set checkpoint.dir=PATH, or --resume PATH/step-NNNNNNN");
    const std::optional<std::string> latest = ckpt::latest_checkpoint(config_.checkpoint.dir);
    if (!latest) {
      resume_.notes.push_back(fmt::format("no checkpoint in {} yet: starting fresh", config_.checkpoint.dir));
      return;
    }
    dir = *latest;
  }
  ckpt::Manifest manifest = ckpt::read_manifest(dir);
  ckpt::check_files(dir, manifest);
  LOOM_CHECK_INPUT(!manifest.state.contains("import"), "checkpoint {} holds imported weights only, no run to resume; "
                   "hint: --init {} starts a run from them", dir, dir);
  const Config saved = parse_config(manifest.config, dir + "/manifest.json");
  const auto before = config_values(saved), now = config_values(config_);
  std::vector<std::string> differ, changed;
  for (size_t i = 0; i < now.size(); ++i) {
    if (before[i].second == now[i].second) continue;
    const std::string text = fmt::format("{} = {} (saved: {})", now[i].first, now[i].second, before[i].second);
    if (must_match(now[i].first)) differ.push_back(text);
    else if (!free_to_change(now[i].first)) changed.push_back(text);
  }
  LOOM_CHECK_INPUT(differ.empty(), "checkpoint {} was saved from another run: {}; hint: these keys must equal the "
                   "saved run's (the layout, memory policy and train.steps may change)", dir, fmt::join(differ, ", "));
  // NOTE [A finished run resumes to nothing]: under --resume auto a checkpoint of the last step
  // means the run is done (a requeued job whose time-limit signal came in its last step): loom
  // says so and exits 0 without training or touching an output. A checkpoint named by path, or
  // one past train.steps, is refused: that resume asks for steps that are not there.
  if (spec == "auto" && manifest.step == config_.train.steps) {
    resume_.complete = dir;
    return;
  }
  LOOM_CHECK_INPUT(manifest.step < config_.train.steps, "checkpoint {} is at step {}, and train.steps is {}: nothing "
                   "is left to train; hint: raise train.steps", dir, manifest.step, config_.train.steps);
  run_id_ = ckpt::run_of(dir).value_or("");
  if (!own.empty()) ckpt::check_dir_for_run(own, run_id_);
  if (!changed.empty())
    resume_.notes.push_back(fmt::format("resuming with changed settings: {}", fmt::join(changed, ", ")));
  resume_.dir = dir;
  resume_.manifest = std::move(manifest);
}

namespace {

// The run's state: the optimizer's pieces (parameters, moments, tables) and the model's buffers,
// each whole on every rank that holds its layer.
std::vector<ckpt::TensorPiece> state_pieces(const replicas::ReplicaOptimizer& optimizer, const models::Model& model) {
  std::vector<ckpt::TensorPiece> pieces = optimizer.state_pieces();
  for (const nn::Buffer& b : model.buffers()) pieces.push_back(ckpt::whole_piece(b.name, b.value));
  return pieces;
}

}  // namespace

// Loads the checkpoint into the allocated state: every rank reads what its pieces need.
void Trainer::restore() {
  const auto begin = std::chrono::steady_clock::now();
  const std::vector<ckpt::TensorPiece> pieces = state_pieces(*optimizer_, model_);
  resume_.bytes = ckpt::load(resume_.dir, *resume_.manifest, pieces, *base_world_);
  resume_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  optimizer_->set_step_count(resume_.manifest->step);
  optimizer_->state_assigned();
  refresh_compute_values();
  resume_.start_step = resume_.manifest->step;
}

// NOTE [Starting from weights]
// checkpoint.init (`loom train --init CKPT`) starts a fresh run, step 0 with a fresh optimizer and
// LR schedule, from the weights of a checkpoint: one `loom ckpt import` wrote, or any run's, of
// any layout. The model must be the same except for what does not change its weights: model.dtype
// (the stored values are converted), seq_len, attn_tile, attn_kernel and bf16_products; every stored shape is
// checked again as it is read. A run that resumes (--resume, or --resume auto finding its own
// checkpoint) continues its own state, and checkpoint.init is then not read: a requeued
// fine-tuning job picks up where it stopped.
void Trainer::check_init() {
  if (config_.checkpoint.init.empty() || resume_.manifest || !resume_.complete.empty()) return;
  const std::string dir = ckpt::checkpoint_of(config_.checkpoint.init);
  ckpt::Manifest manifest = ckpt::read_manifest(dir);
  ckpt::check_files(dir, manifest);
  const Config saved = parse_config(manifest.config, dir + "/manifest.json");
  const auto before = config_values(saved), now = config_values(config_);
  std::vector<std::string> differ;
  for (size_t i = 0; i < now.size(); ++i) {
    const std::string& key = now[i].first;
    if (!key.starts_with("model.") || before[i].second == now[i].second) continue;
    if (key == "model.dtype" || key == "model.seq_len" || key == "model.attn_tile" || key == "model.attn_kernel" ||
        key == "model.bf16_products")
      continue;
    differ.push_back(fmt::format("{} = {} (checkpoint: {})", key, now[i].second, before[i].second));
  }
  LOOM_CHECK_INPUT(differ.empty(), "checkpoint.init = {} holds another model: {}; hint: set the model keys to the "
                   "checkpoint's (`loom ckpt inspect {}` prints its config)", dir, fmt::join(differ, ", "), dir);
  resume_.notes.push_back(fmt::format("starting from the weights of {} (step {})", dir, manifest.step));
  init_ = {dir, std::move(manifest)};
}

// The parameters (and the model's buffers) from checkpoint.init's checkpoint; the optimizer's
// moments stay at their fresh zeros.
void Trainer::initialize() {
  std::vector<ckpt::TensorPiece> pieces;
  for (ckpt::TensorPiece& p : state_pieces(*optimizer_, model_))
    if (p.name.find(':') == std::string::npos) pieces.push_back(std::move(p));
  ckpt::load(init_.dir, *init_.manifest, pieces, *base_world_);
  optimizer_->state_assigned();
  refresh_compute_values();
}

// The sparse path's choices of the saved run, when this run's layout is the same (its replica
// group and tp): "auto" then keeps them instead of measuring again, so the continued run is the
// very same one.
std::vector<replicas::TableChoice> Trainer::saved_table_choices(int64_t* partitions) const {
  std::vector<replicas::TableChoice> out;
  if (!resume_.manifest || !resume_.manifest->state.contains("sparse")) return out;
  const nlohmann::json& s = resume_.manifest->state.at("sparse");
  if (s.value("replicas", -1) != replicas_size() || s.value("tp", -1) != config_.parallel.tp) return out;
  *partitions = s.value("partitions", int64_t{0});
  for (const auto& t : s.at("tables"))
    out.push_back({.table = t.at("table"), .sparse = t.at("sparse"), .reason = "auto: as the saved run chose"});
  return out;
}

ckpt::CheckpointMeta Trainer::checkpoint_meta(int64_t steps_done) {
  const auto& t = config_.train;
  const auto& p = config_.parallel;
  const optim::LrSchedule schedule{t.lr, t.min_lr_ratio, t.warmup, t.steps};
  // Every rank's tables (only the stages with an embedding have any), by name.
  nlohmann::json mine = nlohmann::json::array();
  for (const replicas::TableChoice& c : table_choices())
    mine.push_back({{"table", c.table}, {"sparse", c.sparse}, {"reason", c.reason}});
  std::map<std::string, nlohmann::json> tables;
  for (const std::string& list : dist::all_gather_text(*base_world_, mine.dump()))
    for (const auto& c : nlohmann::json::parse(list)) tables.emplace(c.at("table").get<std::string>(), c);
  nlohmann::json table_list = nlohmann::json::array();
  for (const auto& [name, c] : tables) table_list.push_back(c);
  at::Tensor parts = at::full({1}, sparse_partitions(), at::TensorOptions().dtype(at::kLong));
  base_world_->all_reduce(parts, dist::ReduceOp::Max);
  if (!run_id_)  // a fresh run's identity, rank 0's (NOTE [A checkpoint folder belongs to one run])
    run_id_ = dist::all_gather_text(*base_world_, base_world_->rank() == 0 ? ckpt::new_run_id() : "").front();
  ckpt::CheckpointMeta meta{.step = steps_done, .config = to_toml(config_)};
  meta.layout = {{"ranks", mesh_->world().size()}, {"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"sp", p.sp},
                 {"zero", p.zero}, {"chunks", p.chunks}, {"schedule", p.schedule}, {"sp_mode", p.sp_mode.name()},
                 {"tp_sequence", p.tp_sequence}, {"cuts", plan_.cuts}};
  meta.state = {
      {"run", {{"id", *run_id_}}},
      {"data", {{"next_step", steps_done}, {"samples", steps_done * t.global_batch},
                {"order", "micro-batch i of step s is the same samples in every layout, from (train.seed, s, i)"}}},
      {"rng", {{"seed", t.seed}, {"generator", "counter-based: (seed, name, element) for values, (seed, step, "
                                               "sample) for synthetic data; no other random state"}}},
      {"lr_schedule", {{"kind", "linear warmup, cosine decay"}, {"lr", t.lr}, {"min_lr_ratio", t.min_lr_ratio},
                       {"warmup", t.warmup}, {"steps", t.steps}, {"next_lr", schedule.at(steps_done)}}},
      {"optimizer", {{"kind", "adamw"}, {"step", optimizer_->step_count()}, {"beta1", t.beta1}, {"beta2", t.beta2},
                     {"weight_decay", t.weight_decay}, {"clip", t.clip}, {"table_update", t.table_update.name()}}},
      {"sparse", {{"partitions", parts.item<int64_t>()}, {"replicas", replicas_size()}, {"tp", p.tp},
                  {"tables", table_list}}}};
  return meta;
}

double Trainer::save_checkpoint(int64_t steps_done) {
  const auto begin = std::chrono::steady_clock::now();
  checkpointer_->save(checkpoint_meta(steps_done), state_pieces(*optimizer_, model_));
  const auto end = std::chrono::steady_clock::now();
  if (trace_) trace_->add("checkpoint_save", "checkpoint", begin, end);
  return std::chrono::duration<double>(end - begin).count();
}

std::unique_ptr<ckpt::Checkpointer> Trainer::make_checkpointer(const std::function<void(int, int64_t)>& hook) {
  ckpt::SaveOptions options{.dir = config_.checkpoint.dir, .keep = config_.checkpoint.keep,
                            .async = config_.checkpoint.async};
  if (hook) options.after_file = [hook, rank = mesh_->rank()](int64_t step) { hook(rank, step); };
  return std::make_unique<ckpt::Checkpointer>(std::move(options), *base_world_);
}

// After step `done` (from 1): every checkpoint.every steps, at the run's last step, and when the
// run is stopped (a signal, --stop-after).
bool Trainer::checkpoint_due(int64_t done, bool stopping) const {
  if (!checkpointer_) return false;
  const int64_t every = config_.checkpoint.every;
  return stopping || done == config_.train.steps || (every > 0 && done % every == 0);
}

// "; checkpoint: DIR" for the closing lines, when a checkpoint was committed.
std::string Trainer::saved_text() const {
  const std::string last = last_checkpoint();
  return last.empty() ? std::string() : fmt::format("; checkpoint: {}", last);
}

}  // namespace loom::train
