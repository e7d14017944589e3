// What a rank's device changes in a run (NOTE [Devices]): the communicator its tensors cross, what
// times its work and where swapped activations go, the memory its plan must fit, its memory budget
// and peak.
#include <fmt/format.h>

#include <algorithm>

#include "loom/core/error.h"
#include "loom/cuda/device_memory.h"
#include "loom/cuda/event_clock.h"
#include "loom/cuda/pinned_swap_tier.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/train/devices.h"
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

std::unique_ptr<dist::Communicator> connect_devices(dist::Communicator& world, cuda::Placement& placement,
                                                    const dist::DeviceBackend* devices, std::string_view device_key) {
  // "auto" may resolve differently on nodes with different GPUs. The ranks of a run train on one
  // kind of device (their collectives and table paths follow it), and use NCCL only if all can.
  const bool cpu = placement.device == TrainDevice::Cpu;
  at::Tensor counts = at::tensor({cpu ? int64_t{0} : int64_t{1},
                                  placement.backend == Backend::Nccl ? int64_t{0} : int64_t{1}}, at::kLong);
  world.all_reduce(counts, dist::ReduceOp::Sum);
  const int64_t gpu_ranks = counts[0].item<int64_t>(), not_nccl = counts[1].item<int64_t>();
  if (gpu_ranks != 0 && gpu_ranks != world.size())
    throw AgreedError(fmt::format("train.device = \"{}\" placed {} of the {} ranks on a GPU and the others on the "
                                  "CPU (their nodes show none): a run's ranks train on one kind of device; hint: "
                                  "train.device = \"cpu\", or start the job on nodes that all have GPUs",
                                  device_key, gpu_ranks, world.size()),
                      2);
  if (not_nccl == 0) return devices->connect(world, placement.gpu);
  placement.backend = Backend::Mpi;
  if (cpu) return nullptr;
  return std::make_unique<dist::HostStagingCommunicator>(world);
}

plan::RankMemory rank_memory(const cuda::Placement& placement, int local_ranks) {
  if (placement.device == TrainDevice::Cpu) return plan::host_rank_memory(local_ranks);
  const int gpus = std::max(1, cuda::devices().count);
  int sharers = 0;
  for (int r = 0; r < local_ranks; ++r) sharers += r % gpus == placement.gpu ? 1 : 0;
  return {.bytes = static_cast<double>(cuda::device_total_bytes(placement.gpu)), .sharers = std::max(1, sharers),
          .where = fmt::format("GPU {}", placement.gpu)};
}

void wait_for_device(const cuda::Placement& placement) {
  if (placement.device != TrainDevice::Cpu) cuda::synchronize(placement.gpu);
}

dist::Communicator& Trainer::device_world(dist::Communicator& world) {
  device_world_ = connect_devices(world, placement_, devices_, config_.train.device.name());
  return device_world_ ? *device_world_ : world;
}

int64_t Trainer::peak_bytes() const {
  return device_.is_cpu() ? memory::peak_bytes() : cuda::device_peak_bytes(placement_.gpu);
}

int64_t Trainer::live_bytes() const {
  return device_.is_cpu() ? memory::live_bytes() : cuda::device_live_bytes(placement_.gpu);
}

// NOTE [Step clock]: host times on the CPU, CUDA events on a GPU.
std::unique_ptr<StepClock> Trainer::step_clock() const {
  return device_.is_cpu() ? make_host_clock() : cuda::make_event_clock(placement_.gpu);
}

// NOTE [Swap tier]: the host's blocks on the CPU, pinned ones and a copy stream on a GPU.
std::function<std::unique_ptr<memory::SwapTier>()> Trainer::swap_tier() const {
  if (device_.is_cpu()) return memory::make_host_tier;
  return [gpu = placement_.gpu] { return cuda::make_pinned_swap_tier(gpu); };
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
