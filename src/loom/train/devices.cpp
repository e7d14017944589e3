// What a rank's device changes in a run (NOTE [Devices]): the communicator its tensors cross, the
// plan's choices it cannot run, its memory budget and peak.
#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/cuda/device_memory.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/train/trainer.h"

namespace loom::train {
namespace {

// The run's memory.budget and the hint its refusals name (plan::budget_hint), set and ended together.
void begin_budget(int64_t bytes, const plan::RunPlan& run_plan) {
  memory::set_budget(bytes);
  memory::set_budget_hint(plan::budget_hint(run_plan));
}
void end_budget() {
  memory::set_budget(0);
  memory::set_budget_hint(memory::kDefaultBudgetHint);
}

}  // namespace

dist::Communicator& Trainer::device_world(dist::Communicator& world) {
  // "auto" may resolve differently on nodes with different GPUs. The ranks of a run train on one
  // kind of device (their collectives and table paths follow it), and use NCCL only if all can.
  at::Tensor counts = at::tensor({device_.is_cpu() ? int64_t{0} : int64_t{1},
                                  placement_.backend == Backend::Nccl ? int64_t{0} : int64_t{1}}, at::kLong);
  world.all_reduce(counts, dist::ReduceOp::Sum);
  const int64_t gpu_ranks = counts[0].item<int64_t>(), not_nccl = counts[1].item<int64_t>();
  if (gpu_ranks != 0 && gpu_ranks != world.size())
    throw AgreedError(fmt::format("train.device = \"{}\" placed {} of the {} ranks on a GPU and the others on the "
                                  "CPU (their nodes show none): a run's ranks train on one kind of device; hint: "
                                  "train.device = \"cpu\", or start the job on nodes that all have GPUs",
                                  config_.train.device.name(), gpu_ranks, world.size()),
                      2);
  if (not_nccl == 0) {
    device_world_ = devices_->connect(world, placement_.gpu);
    return *device_world_;
  }
  placement_.backend = Backend::Mpi;
  if (device_.is_cpu()) return world;
  device_world_ = std::make_unique<dist::HostStagingCommunicator>(world);
  return *device_world_;
}

int64_t Trainer::peak_bytes() const {
  return device_.is_cpu() ? memory::peak_bytes() : cuda::device_peak_bytes(placement_.gpu);
}

// What the plan chose that a GPU rank cannot run yet: memory.policy = "auto" may swap a layer.
void Trainer::check_device_plan() const {
  for (const plan::LayerPlan& layer : plan_.chain)
    LOOM_CHECK_INPUT(layer.policy != nn::MemoryPolicy::Swap,
                     "memory.policy = \"{}\" swaps layer {} to host memory, but train.device places this rank on "
                     "{}, and the swap tier has no GPU implementation yet; hint: memory.policy = \"manual\" with "
                     "memory.recompute",
                     config_.memory.policy.name(), layer.name, device_.str());
}

// memory.budget: the host's accounting allocator, or on a GPU its allocator's share of the GPU
// (NOTE [Device memory]); a GPU rank's host allocations (batches, checkpoint copies) stay unbounded.
void Trainer::begin_budgets() {
  const int64_t budget = config_.budget_bytes();
  if (budget == 0) return;
  if (device_.is_cpu()) begin_budget(budget, plan_);
  else cuda::set_device_budget(placement_.gpu, budget);
}

void Trainer::end_budgets() noexcept {
  end_budget();
  if (device_.is_cpu() || config_.budget_bytes() == 0) return;
  try {
    cuda::set_device_budget(placement_.gpu, 0);
  } catch (const std::exception&) {  // a GPU that failed keeps its bound: the process is ending
  }
}

std::string gpu_out_of_memory(const c10::OutOfMemoryError& e) {
  const std::string what = e.what_without_backtrace();
  return fmt::format("the GPU's memory (or memory.budget's share of it) ran out: {}", what.substr(0, what.find('\n')));
}

}  // namespace loom::train
