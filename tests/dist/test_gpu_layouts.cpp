// The rule above all others on a GPU (NOTE [Devices]): 2 and 4 ranks sharing the GPUs through MPI's
// host buffers (NOTE [Host staging]) train the same model as the serial run on the CPU, in float64
// at 1e-9: dp, tp, pp, sp alone and combined, a pipeline swapping every layer to pinned host
// memory (NOTE [Swap tier]), GPT and Llama. Skipped, on every rank alike, where no GPU is usable;
// scripts/device-check.sh runs them where one is lent and Open MPI can start ranks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout_harness.h"
#include "loom/cuda/devices.h"
#include "world.h"

namespace loom::test {
namespace {

struct GpuLayout {
  int dp = 1, tp = 1, pp = 1, sp = 1;
  bool swap = false;
  int zero = 0;
  std::string name() const {
    return fmt::format("dp{} tp{} pp{} sp{}{}{}", dp, tp, pp, sp, swap ? " swap" : "",
                       zero ? fmt::format(" zero{}", zero) : "");
  }
};

// Every layout of `ranks` ranks these tests run: each axis alone, then two axes together.
std::vector<GpuLayout> layouts(int ranks) {
  if (ranks == 2) return {{.dp = 2}, {.tp = 2}, {.pp = 2}, {.pp = 2, .swap = true}, {.sp = 2}, {.dp = 2, .zero = 3}};
  if (ranks == 4)
    return {{.dp = 4}, {.tp = 4}, {.pp = 4}, {.sp = 4}, {.dp = 2, .tp = 2}, {.dp = 2, .pp = 2, .swap = true},
            {.tp = 2, .sp = 2}, {.pp = 2, .sp = 2}, {.dp = 4, .zero = 2}, {.dp = 2, .pp = 2, .zero = 3}};
  return {};
}

// 8 micro-batches of 1 (any dp of 2 or 4), 4 blocks (pp 4), 4 heads or kv heads (tp 4), 24
// tokens (sp 4).
Config config(const std::string& kind) {
  Config c = kind == "llama" ? small_llama(97, /*n_layers=*/4, /*seq_len=*/24, 8, 1)
                             : small_gpt(97, /*n_layers=*/4, /*seq_len=*/24, 8, 1);
  c.train.steps = 3;
  return c;
}

void expect_gpu_layouts_equal_the_cpu(const std::string& kind) {
  for (const GpuLayout& l : layouts(world().size())) {
    SCOPED_TRACE(kind + " " + l.name());
    Config c = config(kind);
    const TrainedRun serial = run_serial(c);  // on the CPU
    c.parallel.dp = l.dp, c.parallel.tp = l.tp, c.parallel.pp = l.pp, c.parallel.sp = l.sp;
    if (l.swap) c.memory.swap = Swap::All;
    c.parallel.zero = l.zero;
    c.train.device = TrainDevice::Cuda;
    c.parallel.backend = Backend::Mpi;  // ranks share the GPUs
    expect_same_training(train_run(c, world()), serial, 1e-9, 1e-9);
  }
}

TEST(GpuLayouts, GptThroughHostStagingEqualsTheSerialCpuRun) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  if (layouts(world().size()).empty()) GTEST_SKIP() << "the layouts are written for 2 and 4 ranks";
  expect_gpu_layouts_equal_the_cpu("gpt");
}

TEST(GpuLayouts, LlamaThroughHostStagingEqualsTheSerialCpuRun) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  if (layouts(world().size()).empty()) GTEST_SKIP() << "the layouts are written for 2 and 4 ranks";
  expect_gpu_layouts_equal_the_cpu("llama");
}

}  // namespace
}  // namespace loom::test
