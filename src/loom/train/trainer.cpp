#include "loom/train/trainer.h"

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <chrono>
#include <ostream>
#include <thread>

#include "loom/core/error.h"
#include "loom/data/sampler.h"
#include "loom/dist/input_agreement.h"
#include "loom/dist/runtime.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/models/dlrm.h"
#include "loom/models/gpt.h"
#include "loom/optim/clip.h"
#include "loom/optim/lr_schedule.h"
#include "loom/pipeline/partition.h"
#include "loom/pipeline/simulator.h"
#include "loom/plan/gemm_peak.h"
#include "loom/train/progress.h"
#include "loom/trace/metrics_writer.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

at::ScalarType dtype_of(const std::string& name) { return name == "float64" ? at::kDouble : at::kFloat; }

int default_threads(int world_size) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return world_size > 1 ? std::max(1, cores / dist::local_rank_count()) : cores;
}

}  // namespace

Trainer::Trainer(Config config, dist::Communicator& world)
    : config_(std::move(config)), dtype_(dtype_of(config_.model.dtype)), world_rank_(world.rank()), base_world_(&world) {
  std::exception_ptr failure;
  try {
    check_input(world.size(), dist::local_rank_count());
  } catch (const InputError&) {
    failure = std::current_exception();
  }
  dist::agree_on_input(world, failure);  // collective: every rank learns whether any rank refused
  const int threads = config_.train.threads > 0 ? static_cast<int>(config_.train.threads) : default_threads(world.size());
  at::set_num_threads(threads);
  world_ = std::make_unique<dist::RecordingCommunicator>(world, comm_stats_);
  mesh_ = std::make_unique<dist::Mesh>(*world_, dist::mesh_shape(config_.parallel));
  model_ = build_model(mesh_->tp(), sp_options());
  const int64_t budget = config_.budget_bytes();
  if (budget > 0) memory::set_budget(budget);
  try {
    allocate();
  } catch (const memory::OutOfMemory& e) {
    memory::set_budget(0);
    throw Error(fmt::format("{} while setting up the run; {}", e.what(), memory_keys(estimate())));
  } catch (...) {
    memory::set_budget(0);  // no destructor runs for a constructor that throws
    throw;
  }
  comm_stats_.clear();  // set-up traffic (communicator splits) is not a step's
}

Trainer::Trainer(Config config, int world_size, int rank, int local_ranks)
    : config_(std::move(config)), dtype_(dtype_of(config_.model.dtype)), world_rank_(rank) {
  check_input(world_size, local_ranks);
}

void Trainer::check(const Config& config, int world_size, int local_ranks) {
  Trainer checked(config, world_size, 0, local_ranks);  // everything, with stage 0's memory
  const auto& p = config.parallel;
  for (int64_t pp_rank = 1; pp_rank < p.pp; ++pp_rank) {  // the other stages' memory (data read once)
    checked.world_rank_ = static_cast<int>(pp_rank * p.sp * p.tp);  // the first rank of the stage
    checked.model_ = checked.build_model(*checked.sizing_tp_, {});
    checked.take_stage_layers();
    checked.check_memory(local_ranks);
  }
}

// Parameters, optimizer state and the executor: the first allocations of the run.
void Trainer::allocate() {
  std::vector<pipeline::StageChunk> chunks = take_stage_layers();
  const optim::AdamWOptions adamw{.beta1 = config_.train.beta1, .beta2 = config_.train.beta2,
                                  .weight_decay = config_.train.weight_decay};
  attach_sparse_tables(adamw);
  const auto seed = static_cast<uint64_t>(config_.train.seed);
  model_.initialise(seed, dtype_);
  if (sparse_) sparse_->initialise(seed, dtype_);
  for (nn::Param* p : model_.params())
    if (p->sparse == nullptr) dense_params_.push_back(p);
  // Weight gradients are summed over data and sequence parallelism in one pass: the dp x sp
  // group (NOTE [Sequence parallelism]); with sp = 1 that is the dp group.
  dist::Communicator& replicas = this->replicas();
  flat_ = std::make_unique<parallel::FlatParams>(model_, replicas.size());
  std::vector<std::vector<nn::Param*>> layer_params;
  for (auto& layer : model_.chain) layer_params.push_back(layer->params());
  sequence_grads_ = std::make_unique<parallel::SequenceGradReducer>(layer_params, mesh_->tp());
  if (config_.parallel.zero == 1) {
    sharded_ = std::make_unique<parallel::ShardedAdamW>(*flat_, replicas, mesh_->tp(), mesh_->pp(), adamw);
  } else {
    reducer_ = std::make_unique<parallel::GradientReducer>(*flat_, replicas, config_.parallel.bucket_mb);
    optimizer_ = std::make_unique<optim::AdamW>(dense_params_, adamw);
  }
  const auto& m = config_.model;
  const int64_t tokens = config_.parallel.tp_sequence ? local_seq() / config_.parallel.tp : local_seq();
  executor_ = std::make_unique<pipeline::PipelineExecutor>(
      schedule_, mesh_->pp(), std::move(chunks), std::vector<int64_t>{config_.train.micro_batch, tokens, m.d_model},
      dtype_);
}

models::Model Trainer::build_model(dist::Communicator& tp, parallel::SpOptions sp) const {
  if (is_dlrm()) return models::build_dlrm(config_.model);
  return models::build_gpt(config_.model, tp, tp_options(), sp);
}

int64_t Trainer::pp_rank_of(int rank) const {
  const auto& p = config_.parallel;
  return (rank / (p.sp * p.tp)) % p.pp;
}

pipeline::Schedule Trainer::make_schedule() const {
  const auto& p = config_.parallel;
  const int64_t local = config_.microbatch_count() / p.dp;
  if (p.schedule.rfind("csv:", 0) == 0) {
    const std::string path = p.schedule.substr(4);
    pipeline::Schedule s = pipeline::read_csv(path);
    LOOM_CHECK_INPUT(s.stages == p.pp && s.microbatches == local && s.chunks == p.chunks,
                     "{}: a schedule of {} stages, {} micro-batches and {} chunks; this run has pp = {}, {} "
                     "micro-batches per data-parallel rank and chunks = {}",
                     path, s.stages, s.microbatches, s.chunks, p.pp, local, p.chunks);
    return s;
  }
  return pipeline::make_schedule(p.schedule, p.pp, local, p.chunks);
}

std::vector<pipeline::StageChunk> Trainer::take_stage_layers() {
  const auto& p = config_.parallel;
  const int64_t bytes = dtype_ == at::kDouble ? 8 : 4, n = static_cast<int64_t>(model_.chain.size());
  const int64_t parts = p.pp * p.chunks, pp_rank = pp_rank_of(world_rank_);
  std::vector<int64_t> cuts;
  if (p.pp_cuts.empty()) {
    std::vector<double> costs;
    for (const auto& layer : model_.chain) {
      const nn::Cost c = layer->cost(config_.train.micro_batch, local_seq(), bytes);
      costs.push_back(c.forward_flops + c.backward_input_flops + c.backward_weight_flops);
    }
    cuts = pipeline::balanced_cuts(costs, parts);
  } else {
    cuts = pipeline::explicit_cuts(p.pp_cuts, n, parts);
  }
  // Merak's stage-aware recomputation keys on the pipeline rank: earlier ranks stash more.
  double ratio = config_.memory.recompute == "full" ? 1.0 : 0.0;
  if (config_.memory.recompute == "stage-aware")
    ratio = pipeline::stage_recompute_ratio(config_.memory.recompute_ratio, pp_rank, p.pp);
  return pipeline::take_stages(model_, cuts, p.pp, pp_rank, p.chunks, ratio);
}

void Trainer::check_input(int world_size, int local_ranks) {
  validate(config_);
  memory::install_accounting_allocator();
  if (is_dlrm())
    clicks_ = data::open_clicks(config_);
  else
    source_ = data::open_source(config_);
  // Layers only, nothing allocated: rank 0's shard shapes under the configured tp degree.
  sizing_tp_ = std::make_unique<dist::SizingCommunicator>(0, static_cast<int>(config_.parallel.tp), "tp");
  model_ = build_model(*sizing_tp_, {});
  // Stages against the chain first: a huge parallel.pp must be refused, not simulated.
  const auto& p = config_.parallel;
  const auto chain = static_cast<int64_t>(model_.chain.size());
  pipeline::check_stage_count(chain, p.pp * p.chunks);
  schedule_ = make_schedule();
  LOOM_CHECK_INPUT(p.pp == 1 || pipeline::message_tags(schedule_) <= pipeline::kMaxTags,
                   "{} micro-batches per data-parallel rank x {} virtual stages need {} message tags, more than "
                   "the {} MPI guarantees; hint: fewer, larger micro-batches",
                   schedule_.microbatches, schedule_.virtual_stages(), pipeline::message_tags(schedule_),
                   pipeline::kMaxTags);
  stage_stashed_ = pipeline::simulate(schedule_).peak_stashed;  // refuses a bad schedule, with its grid
  take_stage_layers();  // this rank's layers, for the memory check
  // Last: the layout's own errors (stages, schedule) say more than a rank count that does not fit.
  dist::check_mesh_shape(dist::mesh_shape(config_.parallel), world_size);
  check_memory(local_ranks);
}

Trainer::~Trainer() {
  optimizer_.reset();
  sharded_.reset();
  model_.chain.clear();
  memory::set_budget(0);  // the budget belongs to this run, not to whatever the process does next
}

dist::Communicator& Trainer::replicas() { return mesh_->sp().size() > 1 ? mesh_->dp_sp() : mesh_->dp(); }

int64_t Trainer::local_seq() const { return config_.model.seq_len / config_.parallel.sp; }

parallel::SpOptions Trainer::sp_options() const {
  return {.sp = &mesh_->sp(), .mode = parallel::sp_mode_of(config_.parallel.sp_mode)};
}

parallel::TpOptions Trainer::tp_options() const {
  return {.overlap = config_.parallel.tp_overlap, .sequence = config_.parallel.tp_sequence};
}

nn::MicroBatch Trainer::microbatch(int64_t step, int64_t index) const {
  const auto& t = config_.train;
  if (is_dlrm()) return clicks_->microbatch(t.global_batch, t.micro_batch, step, index);
  nn::MicroBatch mb = data::make_microbatch(*source_, {t.global_batch, t.micro_batch, config_.model.seq_len}, step, index);
  if (config_.parallel.sp > 1) {  // this rank's chunks of every sequence (NOTE [Sequence parallelism])
    const std::vector<int64_t> chunks = parallel::sequence_chunks(sp_options());
    const int64_t length = local_seq() / static_cast<int64_t>(chunks.size());
    auto mine = [&](const at::Tensor& t) {
      std::vector<at::Tensor> parts;
      for (int64_t c : chunks) parts.push_back(t.narrow(1, c * length, length));
      return at::cat(parts, 1);
    };
    mb.tokens = mine(mb.tokens), mb.targets = mine(mb.targets);
  }
  return mb;
}

std::vector<nn::MicroBatch> Trainer::local_microbatches(int64_t step) const {
  const int64_t local = config_.microbatch_count() / config_.parallel.dp, first = mesh_->dp_rank() * local;
  std::vector<nn::MicroBatch> out;
  for (int64_t i = 0; i < local; ++i) out.push_back(microbatch(step, first + i));
  return out;
}

void Trainer::attach_sparse_tables(const optim::AdamWOptions& adamw) {
  if (config_.parallel.sparse != "auto") return;
  std::vector<nn::Param*> tables;
  for (nn::Param* p : model_.params())
    if (p->embedding) tables.push_back(p);
  if (tables.empty()) return;  // a pipeline stage without the embedding
  const std::vector<nn::MicroBatch> step0 = config_.parallel.sparse_partitions > 0 ? std::vector<nn::MicroBatch>{}
                                                                                    : local_microbatches(0);
  sparse_ = std::make_unique<parallel::SparseTables>(tables, replicas(), config_.parallel.sparse_partitions, adamw,
                                                     dtype_, [&] {
                                                       for (auto& layer : model_.chain) layer->pull_rows(step0);
                                                     });
}

at::Tensor Trainer::value_of(nn::Param& param) const {
  return param.sparse != nullptr ? param.sparse->gather_full() : param.value;
}

template <class Fn>
auto Trainer::timed(const std::string& name, const char* category, Fn&& fn) {
  if (!trace_) return fn();
  const auto start = Clock::now();
  auto result = fn();
  trace_->add(name, category, start, Clock::now());
  return result;
}

double Trainer::optimizer_step(double lr, const std::function<void(double)>& before_update) {
  const double clip = config_.train.clip;
  // Sparse tables: row gradients to their owners, and their part of the global norm.
  const std::pair<double, double> sparse = timed("sparse_push", "communication", [&] {
    return sparse_ ? sparse_->push() : std::pair<double, double>{0, 0};
  });
  double norm = 0;
  if (sharded_) {
    norm = timed("zero_step", "optimizer", [&] { return sharded_->step(lr, clip, sparse, before_update); });
  } else {
    timed("all_reduce_wait", "communication", [&] {
      reducer_->finish();
      return 0;
    });
    norm = timed("clip", "optimizer", [&] {
      return optim::clip_grad_norm(dense_params_, clip, mesh_->tp(), &mesh_->pp(), sparse);
    });
    before_update(norm);
    timed("adamw", "optimizer", [&] {
      optimizer_->step(lr);
      return 0;
    });
  }
  timed("sparse_adamw", "optimizer", [&] {  // lazy: the touched rows only
    if (sparse_) sparse_->step(lr, optim::clip_factor(norm, clip));
    return 0;
  });
  return norm;
}

// The simulator's bubble for this step's measured action times: every stage's mean F, B, W and R
// (one all-reduce over pp of a [virtual stages, 4] table), replayed through the same schedule.
double Trainer::predicted_bubble(const pipeline::StepResult& result) {
  at::Tensor table = at::zeros({schedule_.virtual_stages(), 4}, at::TensorOptions().dtype(at::kDouble));
  for (size_t c = 0; c < result.measured.size(); ++c) {
    const pipeline::StageCosts& m = result.measured[c];
    const int64_t v = schedule_.virtual_stage(mesh_->pp_rank(), static_cast<int64_t>(c));
    table[v].copy_(at::tensor({m.f, m.b, m.w, m.r}, table.options()));
  }
  mesh_->pp().all_reduce(table, dist::ReduceOp::Sum);
  pipeline::Costs costs;
  const auto rows = table.accessor<double, 2>();
  for (int64_t v = 0; v < schedule_.virtual_stages(); ++v)
    costs.stages.push_back({rows[v][0], rows[v][1], rows[v][2], rows[v][3]});
  return pipeline::simulate(schedule_, costs).bubble_fraction;
}

// NOTE [Non-finite guard]: a step whose loss or gradient norm is not finite is stopped after the
// norm is known and before any parameter changes (an infinite learning rate, a diverged run, bad
// data): the weights stay those of the last good step and the outputs are closed. The loss is
// summed over the replicas and the norm over every group, so all ranks see the same values and
// stop together.
void Trainer::check_finite(int64_t step, double loss, double norm) const {
  if (std::isfinite(loss) && std::isfinite(norm)) return;
  throw AgreedError(fmt::format("step {}: the loss is {} and the gradient norm {}; stopped before the optimizer "
                                "applied it (the weights are {}); hint: lower train.lr (now {}), set train.clip, or "
                                "check the data",
                                step, loss, norm, step == 1 ? std::string("the initial ones") : fmt::format("those after step {}", step - 1),
                                config_.train.lr),
                    1);
}

// Every segment's and replica's share of the loss, summed (and over pp from the last stage).
double Trainer::summed_loss(double local) {
  at::Tensor loss = at::full({1}, local, at::TensorOptions().dtype(at::kDouble));
  replicas().all_reduce(loss, dist::ReduceOp::Sum);
  if (mesh_->pp().size() > 1) mesh_->pp().all_reduce(loss, dist::ReduceOp::Sum);  // only the last stage has it
  return loss.item<double>();
}

// One optimizer step: the schedule's micro-batches, the loss summed over the replicas (and over pp
// from the last stage), the guarded optimizer update, the peak memory over ranks; with pp > 1 also
// the bubbles and each stage's peak.
StepRecord Trainer::train_step(int64_t step, double lr) {
  const auto start = Clock::now();
  comm_stats_.clear();  // keep one step's records: a long run must not grow them without bound
  StepRecord r;
  r.step = step + 1;
  r.lr = lr;
  flat_->grads.zero_();
  const std::vector<nn::MicroBatch> microbatches = local_microbatches(step);
  if (sparse_) {  // the rows this step looks up, from their owners
    timed("sparse_pull", "communication", [&] {
      for (auto& layer : model_.chain) layer->pull_rows(microbatches);
      return 0;
    });
  }
  pipeline::ExecutorHooks hooks;
  hooks.microbatch = [&](int64_t i) { return microbatches[static_cast<size_t>(i)]; };
  // A layer's gradients are final once the rank's last micro-batch has passed it: under
  // tp_sequence its norms' partial gradients are summed over tp, then dp may reduce them.
  hooks.layer_done = [&](size_t layer) {
    sequence_grads_->layer_done(layer);
    if (reducer_) reducer_->layer_done(layer);
  };
  if (trace_) hooks.trace = [&](const std::string& name, const char* category, auto begin, auto end) {
    trace_->add(name, category, begin, end);
  };
  const pipeline::StepResult result = executor_->run_step(hooks);
  // The loss is summed once the gradients are (a blocking collective among the buckets' in-flight
  // all-reduces would hold them up), and checked before the update.
  r.grad_norm = optimizer_step(lr, [&](double norm) {
    r.loss = summed_loss(result.loss);
    check_finite(r.step, r.loss, norm);
  });
  at::Tensor peak = at::full({1}, memory::peak_bytes(), at::kLong);
  mesh_->world().all_reduce(peak, dist::ReduceOp::Max);
  r.peak_bytes = peak.item<int64_t>();
  r.comm_bytes = comm_stats_.bytes_by_axis();
  if (mesh_->pp().size() > 1) {  // idle time in the pipeline's part of the step, averaged over the ranks
    at::Tensor bubble = at::full({1}, 1.0 - result.busy_s / result.wall_s, at::TensorOptions().dtype(at::kDouble));
    mesh_->world().all_reduce(bubble, dist::ReduceOp::Sum);
    r.bubble_fraction = bubble.item<double>() / mesh_->world().size();
    r.predicted_bubble_fraction = predicted_bubble(result);
    const int64_t pp = mesh_->pp().size();
    at::Tensor mine = at::full({1}, memory::peak_bytes(), at::kLong), stages = at::empty({pp}, at::kLong);
    mesh_->pp().all_gather(mine, stages);
    for (int64_t i = 0; i < pp; ++i) r.peak_bytes_by_stage.push_back(stages[i].item<int64_t>());
  }
  r.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return r;
}

namespace {

// The run's files on rank 0 (NOTE [Output files]): closed, and so renamed into place, however the
// run ends; a run that fails leaves every finished step readable.
struct RunOutputs {
  trace::MetricsWriter metrics;
  std::unique_ptr<trace::TraceFile> trace;
  bool closed = false;
  void close() {
    if (std::exchange(closed, true)) return;
    metrics.close();
    if (trace) trace->close();
  }
  ~RunOutputs() {
    try {
      close();
    } catch (...) {  // already failing: the first error is the one to report
    }
  }
};

// The first signal any rank received (0: none), agreed over the world so all stop together.
int agreed_signal(dist::InterruptHandler* interrupts, dist::Communicator& world) {
  if (interrupts == nullptr) return 0;
  int signal = interrupts->signal();
  if (world.size() > 1) {
    at::Tensor vote = at::full({1}, static_cast<int64_t>(signal), at::kLong);
    world.all_reduce(vote, dist::ReduceOp::Max);
    signal = static_cast<int>(vote.item<int64_t>());
  }
  if (signal != 0) interrupts->acknowledge();
  return signal;
}

}  // namespace

void Trainer::print_header(std::ostream& console) {
  console << fmt::format("loom: {} parameters, {}, dp={}{}, {} ranks x {} threads; data: {}\n", model_.param_count(),
                         config_.model.dtype, mesh_->dp().size(), config_.parallel.zero ? " (ZeRO-1)" : "",
                         mesh_->world().size(), at::get_num_threads(),
                         is_dlrm() ? clicks_->describe() : source_->describe());
  if (sparse_) {
    std::string trials;
    for (auto [p, seconds] : sparse_->trials()) trials += fmt::format(" P={}: {:.2f} ms", p, seconds * 1e3);
    console << fmt::format("loom: {} sparse table{} in {} partitions over {} ranks{}\n", sparse_->size(),
                           sparse_->size() == 1 ? "" : "s", sparse_->partitions(), replicas().size(),
                           trials.empty() ? std::string(config_.parallel.sparse_partitions > 0 ? " (set)" : "")
                                          : "; trials" + trials);
  }
  console << std::flush;  // a pipe or a file sees the header before the first step
}

std::vector<StepRecord> Trainer::run(const TrainOptions& options) {
  const auto& t = config_.train;
  const bool rank0 = mesh_->rank() == 0;
  const int64_t bytes = dtype_ == at::kDouble ? 8 : 4;
  const double peak_flops = options.peak_flops > 0 ? options.peak_flops : plan::measure_gemm_peak(dtype_, 0.2);
  const nn::Cost cost = model_.cost(t.micro_batch, local_seq(), bytes);
  const int64_t local = config_.microbatch_count() / mesh_->dp().size();
  // MFU of this rank: its own micro-batches' FLOPs against its cores' GEMM peak.
  const double flops_per_step =
      static_cast<double>(local) * (cost.forward_flops + cost.backward_input_flops + cost.backward_weight_flops);
  // Throughput counts tokens for a GPT, samples for a DLRM.
  const double tokens_per_step = static_cast<double>(t.global_batch * (is_dlrm() ? 1 : config_.model.seq_len));
  const optim::LrSchedule schedule{t.lr, t.min_lr_ratio, t.warmup, t.steps};
  memory::reset_peak();  // the GEMM probe above is not part of the run
  RunOutputs outputs{trace::MetricsWriter(rank0 ? options.metrics_path : ""), nullptr};
  if (!options.trace_path.empty()) {
    if (rank0) outputs.trace = std::make_unique<trace::TraceFile>(options.trace_path, mesh_->world().size());
    mesh_->world().barrier();  // every rank's trace starts from the same moment: one time axis
    trace_ = std::make_unique<trace::ChromeTrace>(mesh_->rank());
  }
  std::ostream* console = rank0 ? options.progress : nullptr;
  if (console != nullptr) print_header(*console);
  ProgressPrinter progress(console, t.steps, is_dlrm() ? "samples" : "tok");
  std::vector<StepRecord> records;
  const auto start = Clock::now();
  for (int64_t step = 0; step < t.steps; ++step) {
    if (options.before_step) options.before_step(mesh_->rank(), step);
    StepRecord r;
    try {
      r = train_step(step, schedule.at(step));
    } catch (const memory::OutOfMemory& e) {
      throw Error(fmt::format("{} in step {}; {}", e.what(), step + 1, memory_keys(estimate())));
    }
    r.tokens_per_s = tokens_per_step / (r.step_ms / 1e3);
    r.mfu = flops_per_step / (r.step_ms / 1e3) / peak_flops;
    outputs.metrics.write({{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                           {is_dlrm() ? "samples_per_s" : "tokens_per_s", r.tokens_per_s}, {"step_ms", r.step_ms},
                           {"mfu", r.mfu}, {"sparse_partitions", sparse_partitions()},
                           {"peak_bytes", r.peak_bytes}, {"comm_bytes_per_step", r.comm_bytes},
                           {"bubble_fraction", r.bubble_fraction},
                           {"predicted_bubble_fraction", r.predicted_bubble_fraction},
                           {"peak_bytes_by_stage", r.peak_bytes_by_stage}});
    if (step % t.log_every == 0 || step + 1 == t.steps) progress.print(r);
    records.push_back(r);
    if (trace_) trace_->flush_gathered(*base_world_, outputs.trace.get());
    if (const int signal = agreed_signal(options.interrupts, *base_world_); signal != 0) {
      outputs.close();
      throw AgreedError(fmt::format("interrupted at step {} by {}; metrics and trace flushed", r.step,
                                    dist::signal_name(signal)),
                        128 + signal, false);
    }
  }
  outputs.close();
  trace_.reset();
  if (console != nullptr) print_summary(*console, records, std::chrono::duration<double>(Clock::now() - start).count(),
                                        options);
  return records;
}

// One line at the end: what was trained, how fast, the final loss, where the outputs went.
void Trainer::print_summary(std::ostream& console, const std::vector<StepRecord>& records, double seconds,
                            const TrainOptions& options) const {
  const auto& t = config_.train;
  const double done = static_cast<double>(records.size()) * static_cast<double>(t.global_batch) *
                      static_cast<double>(is_dlrm() ? 1 : config_.model.seq_len);
  std::string where;
  if (!options.metrics_path.empty()) where += fmt::format("; metrics: {}", options.metrics_path);
  if (!options.trace_path.empty()) where += fmt::format("; trace: {}", options.trace_path);
  console << fmt::format("loom: done: {} steps, {:.0f} {} in {:.2f} s ({:.0f} {}/s), final loss {:.4f}{}\n",
                         records.size(), done, is_dlrm() ? "samples" : "tokens", seconds, done / seconds,
                         is_dlrm() ? "samples" : "tok", records.empty() ? 0.0 : records.back().loss, where)
          << std::flush;
}

}  // namespace loom::train
