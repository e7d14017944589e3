#include "loom/train/trainer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>
#include <chrono>
#include <thread>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/core/error.h"
#include "loom/cuda/device_memory.h"
#include "loom/cuda/placement.h"
#include "loom/data/sampler.h"
#include "loom/data/token_source.h"
#include "loom/dist/input_agreement.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/models/registry.h"
#include "loom/nn/precision.h"
#include "loom/optim/lr_schedule.h"
#include "loom/pipeline/partition.h"
#include "loom/plan/run_plan.h"
#include "loom/plan/gemm_peak.h"
#include "loom/plan/mfu.h"
#include "loom/train/devices.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

int default_threads(const dist::Communicator& world) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return world.size() > 1 ? std::max(1, cores / world.local_ranks()) : cores;
}

}  // namespace

Trainer::Trainer(Config config, dist::Communicator& world, const std::string& resume, const models::ModelKinds& kinds,
                 const dist::DeviceBackend* devices)
    : config_(std::move(config)),
      kinds_(kinds),
      world_rank_(world.rank()),
      devices_(devices),
      base_world_(&world) {
  std::exception_ptr failure;
  try {
    check_input(world.size(), world.local_rank(), world.local_ranks(), resume);
  } catch (const InputError&) {
    failure = std::current_exception();
  }
  dist::agree_on_input(world, failure);  // collective: every rank learns whether any rank refused
  const int threads = config_.train.threads > 0 ? static_cast<int>(config_.train.threads) : default_threads(world);
  at::set_num_threads(threads);
  world_ = std::make_unique<dist::RecordingCommunicator>(device_world(world), comm_stats_);
  mesh_ = std::make_unique<dist::Mesh>(*world_, dist::mesh_shape(config_.parallel), static_cast<int>(config_.parallel.ep));
  model_ = build_model(mesh_->tp(), sp_options());
  begin_budgets();
  try {
    allocate();
    if (resume_.manifest) restore();
    else if (init_.manifest) initialize();
  } catch (const memory::OutOfMemory& e) {
    end_budgets();
    throw Error(fmt::format("{} while setting up the run; {}", e.what(), plan::memory_text(plan_, estimate())));
  } catch (const c10::OutOfMemoryError& e) {
    end_budgets();
    throw Error(fmt::format("{} while setting up the run; {}", gpu_out_of_memory(e), plan::memory_text(plan_, estimate())));
  } catch (...) {
    end_budgets();  // no destructor runs for a constructor that throws
    throw;
  }
  comm_stats_.clear();  // set-up traffic (communicator splits) is not a step's
}

Trainer::Trainer(Config config, int world_size, int rank, int local_ranks, const std::string& resume,
                 const models::ModelKinds& kinds, const dist::DeviceBackend* devices)
    : config_(std::move(config)),
      kinds_(kinds),
      world_rank_(rank),
      devices_(devices) {
  check_input(world_size, 0, local_ranks, resume);
}

plan::RunPlan Trainer::check(const Config& config, int world_size, int local_ranks, const std::string& resume,
                             const models::ModelKinds& kinds, const dist::DeviceBackend* devices) {
  Trainer checked(config, world_size, 0, local_ranks, resume, kinds, devices);  // every stage's memory is checked on the plan
  return std::move(checked.plan_);
}

// Parameters, optimizer state and the executor: the first allocations of the run.
void Trainer::allocate() {
  const auto& p = config_.parallel;
  std::vector<pipeline::StageChunk> chunks =
      pipeline::take_stages(model_, plan_.cuts, plan_.schedule, mesh_->pp_rank(), policies());
  const optim::AdamWOptions adamw{.beta1 = config_.train.beta1, .beta2 = config_.train.beta2,
                                  .weight_decay = config_.train.weight_decay};
  // Each embedding table on its path (NOTE [Table paths]) before anything is allocated: a table on
  // the sparse path is never whole on a rank.
  auto tables = std::make_unique<replicas::SparseTables>(model_, replicas(), mesh_->tp(), table_options(adamw));
  const auto seed = static_cast<uint64_t>(config_.train.seed);
  // ZeRO-2/3 make each layer's values as they shard it: the rank never holds the model whole.
  if (p.zero < 2) model_.initialise(seed, param_options());
  tables->initialise(seed, dtype());
  std::vector<std::vector<nn::Param*>> layer_params;
  for (auto& layer : model_.chain) layer_params.push_back(layer->params());
  sequence_grads_ = std::make_unique<parallel::SequenceGradReducer>(layer_params, mesh_->tp());
  // Weight gradients are summed over data and sequence parallelism in one pass: the dp x sp
  // group (NOTE [Sequence parallelism]); with sp = 1 that is the dp group.
  optimizer_ = std::make_unique<replicas::ReplicaOptimizer>(
      model_, replicas(), mesh_->tp(), mesh_->pp(),
      replicas::ReplicaOptions{.zero = static_cast<int>(p.zero), .shard_group = p.shard_ranks(),
                               .bucket_mb = p.bucket_mb, .clip = config_.train.clip, .adamw = adamw,
                               .grad_wire = grad_wire(), .activations = activations(),
                               .initialise = [this, seed](nn::Param& param) { nn::initialise(param, seed, param_options()); },
                               .ep = &mesh_->ep(), .expert_replicas = &mesh_->expert_replicas()},
      std::move(tables));
  refresh_compute_values();
  const auto& m = config_.model;
  const int64_t tokens = config_.parallel.tp_sequence ? local_seq() / config_.parallel.tp : local_seq();
  executor_ = std::make_unique<pipeline::PipelineExecutor>(
      plan_.schedule, mesh_->pp(), std::move(chunks), std::vector<int64_t>{config_.train.micro_batch, tokens, m.d_model},
      at::TensorOptions().dtype(activations()).device(device_), swap_tier());
  clock_ = step_clock();
}

// parallel.grad_dtype: the type gradients cross the replicas in (nullopt: the parameters').
std::optional<at::ScalarType> Trainer::grad_wire() const {
  if (config_.parallel.grad_dtype == GradDType::BFloat16) return at::kBFloat16;
  return std::nullopt;
}

// The products' copies of the parameters after they change (NOTE [Mixed precision]).
void Trainer::refresh_compute_values() {
  for (nn::Param* p : model_.params()) nn::refresh_compute(*p, activations());
}

// The model's layers for this rank, their products on the rank's path (NOTE [bf16 products]).
models::Model Trainer::build_model(dist::Communicator& tp, parallel::SpOptions sp) const {
  return models::build_model(*kind_, config_.model, {.tp = tp, .tp_options = tp_options(), .sp = sp, .ep = &mesh_->ep()},
                             products_.path);
}

// Every check that can fail on bad input, on the plan: nothing is allocated and nothing sent.
void Trainer::check_input(int world_size, int local_rank, int local_ranks, const std::string& resume) {
  data::resolve_vocab(config_);  // model.vocab = "auto" (NOTE [Vocabulary from the data])
  models::validate_config(config_, kinds_);
  placement_ = cuda::place_this_rank(config_, local_rank, local_ranks,  // NOTE [Devices]
                                     [this] { return dist::backend_missing(devices_); });
  cuda::check_trainable(config_, placement_);
  device_ = placement_.torch_device();
  if (config_.model.dtype == DType::BFloat16)  // refused before anything is allocated
    products_ = nn::choose_bf16_products(config_.model.bf16_products, nn::this_cpu(), !device_.is_cpu());
  if (!config_.checkpoint.dir.empty()) ckpt::check_writable_dir(config_.checkpoint.dir);
  check_resume(resume);
  check_init();
  memory::install_accounting_allocator();
  kind_ = &kinds_.find(config_.model.kind);
  data_ = kind_->open_data(config_);
  valid_ = open_valid(*kind_, config_);
  const plan::CostModel costs = plan::CostModel::for_config(config_);  // this machine's (NOTE [Cost model])
  plan_ = plan::make_plan(config_, world_size, costs, kinds_);
  // A GPU rank's host allocations so far are not on its device.
  const auto live = device_.is_cpu() ? static_cast<double>(memory::live_bytes()) : 0.0;
  const plan::RankMemory memory = rank_memory(placement_, local_ranks);  // train/devices.h
  plan::check_memory(plan_, memory, live);
  if (sparse_mode() == SparseMode::Auto)
    plan_.dense_tables_fit = plan::dense_tables_fit(plan_, memory, live, costs, kinds_);
}

// The plan's memory policy of every chain layer.
std::vector<nn::MemoryPolicy> Trainer::policies() const {
  std::vector<nn::MemoryPolicy> out;
  for (const plan::LayerPlan& layer : plan_.chain) out.push_back(layer.policy);
  return out;
}

Trainer::~Trainer() {
  checkpointer_.reset();  // an async save's writer may still be reading the state: it finishes first
  optimizer_.reset();  // it holds the parameters' addresses
  model_.chain.clear();
  end_budgets();  // the budget belongs to this run, not to whatever the process does next
}

dist::Communicator& Trainer::replicas() { return mesh_->sp().size() > 1 ? mesh_->dp_sp() : mesh_->dp(); }

parallel::SpOptions Trainer::sp_options() const {
  return {.sp = &mesh_->sp(), .mode = config_.parallel.sp_mode};
}

// The sampler reads on the host; a GPU rank's micro-batch is copied to its device, this rank's
// sequence segments only.
nn::MicroBatch Trainer::microbatch(const data::Batches& batches, int64_t step, int64_t index) const {
  return parallel::local_segments(batches.microbatch(step, index), sp_options()).to(device_);
}

std::vector<nn::MicroBatch> Trainer::local_microbatches(int64_t step, const data::Batches* batches) const {
  const int64_t local = config_.microbatch_count() / config_.parallel.dp, first = mesh_->dp_rank() * local;
  std::vector<nn::MicroBatch> out;
  for (int64_t i = 0; i < local; ++i) out.push_back(microbatch(batches ? *batches : *data_, step, first + i));
  return out;
}

// "auto" measures both paths, with the backward that follows a table and the rest of its gradient
// bucket as they are in a step, and may choose dense only where the plan found the run fits in
// memory with every table dense (plan::dense_tables_fit); a run resuming one of the same layout
// keeps its choices.
replicas::TableOptions Trainer::table_options(const optim::AdamWOptions& adamw) const {
  const auto& p = config_.parallel;
  replicas::TableOptions options{
      .mode = sparse_mode(), .update = config_.train.table_update, .partitions = p.sparse_partitions,
      .adamw = adamw, .dtype = dtype(), .dense_fits = plan_.dense_tables_fit, .batch = config_.train.micro_batch,
      .seq = local_seq(),
      .bucket_elements = static_cast<int64_t>(p.bucket_mb * 1024 * 1024 / static_cast<double>(at::elementSize(dtype())))};
  if (options.mode == SparseMode::Auto) options.saved = saved_table_choices(&options.saved_partitions);
  if (replicas::tables_measure(options.mode, p.sparse_partitions)) options.step0 = local_microbatches(0);
  return options;
}

// This rank's device's GEMM peak in the type the products run in, on their path (NOTE [bf16
// products]), measured outside memory.budget (NOTE [Measurements outside the budget]).
double Trainer::gemm_peak() const {
  const memory::BudgetLifted lifted;
  return plan::measure_gemm_peak(activations(), 0.2, plan::gemm_peak_sizes(device_), device_, products_.path);
}

// The whole job's model FLOPs of one step, as the simulator counts them (NOTE [MFU]).
double Trainer::flops_per_step() const { return plan::step_model_flops(plan_); }

std::vector<StepRecord> Trainer::run(const TrainOptions& options) {
  const auto& t = config_.train;
  if (!resume_.complete.empty()) {  // NOTE [A finished run resumes to nothing]
    if (mesh_->rank() == 0 && options.progress != nullptr)
      *options.progress << fmt::format("loom: the run is complete: checkpoint {} is at its last step ({} of {}); "
                                       "nothing to train\n", resume_.complete, t.steps, t.steps)
                        << std::flush;
    return {};
  }
  return run_steps(options);
}

std::vector<StepRecord> Trainer::run_steps(const TrainOptions& options) {
  const auto& t = config_.train;
  // Every rank sees the same step and flag: all refuse together.
  if (options.stop_after > 0 && options.stop_after <= resume_.start_step)
    throw AgreedError(fmt::format("--stop-after {} is not after step {}, where the run resumes from {}: nothing to "
                                  "train; hint: a later step, or no --stop-after",
                                  options.stop_after, resume_.start_step, resume_.dir),
                      2);
  const double peak_flops = options.peak_flops > 0 ? options.peak_flops : gemm_peak();
  const double flops = flops_per_step();
  const optim::LrSchedule schedule{t.lr, t.min_lr_ratio, t.warmup, t.steps};
  memory::reset_peak();  // the GEMM probe above is not part of the run
  if (!device_.is_cpu()) cuda::reset_device_peak(placement_.gpu);
  const int64_t last = options.stop_after > 0 ? std::min(options.stop_after, t.steps) : t.steps;
  RunReport report({.metrics_path = options.metrics_path, .trace_path = options.trace_path,
                    .console = options.progress, .steps = t.steps, .last_step = last, .log_every = t.log_every,
                    .samples_per_step = t.global_batch, .resumed_step = resume_.start_step,
                    .unit = kind_->throughput(config_.model), .ranks = mesh_->world().size()},
                   mesh_->rank() == 0, mesh_->world().size());
  const dist::PeerLossAction finalise(options.interrupts, [&report] { report.finalise_now(); });
  if (!options.trace_path.empty()) {
    mesh_->world().barrier();  // every rank's trace starts from the same moment: one time axis
    trace_ = std::make_unique<trace::ChromeTrace>(mesh_->rank());
  }
  report.header(header());
  if (!config_.checkpoint.dir.empty()) checkpointer_ = make_checkpointer(options.after_checkpoint_file);
  std::vector<StepRecord> records;
  const auto start = Clock::now();
  for (int64_t step = resume_.start_step; step < last; ++step) {
    if (options.before_step) options.before_step(mesh_->rank(), step);
    records.push_back(guarded_step(step, schedule.at(step)));
    StepRecord& record = records.back();
    if (checkpointer_) checkpointer_->poll();  // an async save commits once every rank wrote it
    const int signal = options.interrupts ? options.interrupts->agreed_signal(*base_world_) : 0;
    if (checkpoint_due(record.step, signal != 0 || record.step == last)) record.checkpoint_s = save_checkpoint(record.step);
    if (signal == 0 && eval_due(record.step, last)) validate_after(record);
    report.step(record, flops, peak_flops);
    if (options.on_step) options.on_step(record);
    if (trace_) trace_->flush_gathered(*base_world_, report.trace_file());
    if (signal != 0) {
      if (checkpointer_) checkpointer_->finish();
      report.close();
      throw AgreedError(fmt::format("interrupted at step {} by {}; metrics and trace flushed{}", record.step,
                                    dist::signal_text(signal), saved_text()),
                        128 + signal, false);
    }
  }
  if (checkpointer_) checkpointer_->finish();
  report.close();
  trace_.reset();
  report.summary(records, std::chrono::duration<double>(Clock::now() - start).count(), last_checkpoint());
  if (last < t.steps && mesh_->rank() == 0 && options.progress != nullptr)
    *options.progress << fmt::format("loom: stopped after step {} of {} (--stop-after){}\n", last, t.steps,
                                     saved_text())
                      << std::flush;
  return records;
}

}  // namespace loom::train
