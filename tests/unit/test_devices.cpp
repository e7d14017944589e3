// Device tensors through the layers and the trainer (NOTE [Devices]): the suite Gpu (label `gpu`),
// skipped with the reason where no GPU is usable. (libtorch's meta device cannot stand in for a GPU
// on the host: in C++ it lacks kernels the layers use, such as index_select.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/cuda/device_memory.h"
#include "loom/cuda/devices.h"
#include "loom/cuda/event_clock.h"
#include "loom/cuda/pinned_swap_tier.h"
#include "loom/data/token_source.h"
#include "loom/nccl/backend.h"
#include "loom/nn/attention.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/registry.h"
#include "loom/train/trainer.h"
#include "tiny_configs.h"
#include "unit/input_error.h"
#include "unit/layer_check.h"

namespace loom {
namespace {

// The parameters are drawn on the host and copied, so a device changes none of their values.
TEST(Gpu, InitialValuesDoNotDependOnTheDevice) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  Config c = test::small_llama(64, 2, 16, 4, 2);
  data::resolve_vocab(c);
  const models::ModelKind& kind = models::ModelKinds::builtin().find(c.model.kind);
  dist::NullCommunicator tp;
  models::Model host = kind.build(c.model, {.tp = tp}), gpu = kind.build(c.model, {.tp = tp});
  host.initialise(7, at::kDouble);
  gpu.initialise(7, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA, 0));
  const std::vector<nn::Param*> want = host.params(), got = gpu.params();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i]->value.is_cuda() && got[i]->grad.is_cuda()) << got[i]->name;
    EXPECT_TRUE(at::equal(got[i]->value.cpu(), want[i]->value)) << got[i]->name;
  }
}

struct Run {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;  // on the host
  int64_t peak_bytes = 0;           // the last step's
};

Run train(const Config& c, const dist::DeviceBackend* devices = nullptr) {
  dist::NullCommunicator world;
  train::Trainer trainer(c, world, "", models::ModelKinds::builtin(), devices);
  Run r;
  for (const train::StepRecord& s : trainer.run({.peak_flops = 1e9})) r.losses.push_back(s.loss), r.peak_bytes = s.peak_bytes;
  for (nn::Param* p : trainer.model().params()) r.weights.push_back(trainer.value_of(*p).to(at::kCPU));
  return r;
}

void expect_same_run(const Run& gpu, const Run& cpu) {
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-9 * std::abs(cpu.losses[i])) << "step " << i + 1;
  ASSERT_EQ(gpu.weights.size(), cpu.weights.size());
  for (size_t i = 0; i < cpu.weights.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TENSOR_NEAR(gpu.weights[i], cpu.weights[i], 1e-9);
  }
}

// The rule above all others, on a GPU: float64, 1e-9 relative, 5 steps, against the CPU run; its
// collectives through host buffers and on NCCL.
void expect_gpu_equals_cpu(Config c) {
  c.train.steps = 5;
  const Run cpu = train(c);
  c.train.device = TrainDevice::Cuda;
  c.parallel.backend = Backend::Mpi;
  const Run gpu = train(c);
  expect_same_run(gpu, cpu);
  // NOTE [Device memory]: the step's peak is the GPU's; the weights, their gradients and both
  // moments (float64) were all held there at once.
  int64_t weight_bytes = 0;
  for (const at::Tensor& w : cpu.weights) weight_bytes += w.numel() * 8;
  EXPECT_GE(gpu.peak_bytes, 4 * weight_bytes);
  const std::unique_ptr<dist::DeviceBackend> nccl = nccl::make_backend(60);
  c.parallel.backend = Backend::Nccl;
  expect_same_run(train(c, nccl.get()), cpu);
}

TEST(Gpu, SerialRunEqualsTheCpuRunInFloat64) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  {
    SCOPED_TRACE("gpt");
    expect_gpu_equals_cpu(test::small_gpt(64, 2, 16, 4, 2));
  }
  {
    SCOPED_TRACE("llama");
    expect_gpu_equals_cpu(test::small_llama(64, 2, 16, 4, 2, 2, /*tied=*/true));
  }
  {
    SCOPED_TRACE("dlrm");
    expect_gpu_equals_cpu(test::small_dlrm(4, 2));
  }
  {
    SCOPED_TRACE("gpt, every layer swapped (NOTE [Swap tier])");
    Config c = test::small_gpt(64, 2, 16, 4, 2);
    c.memory.swap = Swap::All;
    expect_gpu_equals_cpu(c);
  }
}

// NOTE [Swap tier] on a GPU: tensors out to pinned blocks and back on the copy stream, bit for bit,
// views of one storage sharing it again, twice (the second round on the blocks the first one
// kept); a tensor written by a product just queued (8192^3: milliseconds on any GPU) leaves only
// once written, or its copy would hold the fresh allocation's bytes, not 8192.
TEST(Gpu, SwapTierRoundTripOnTheDevice) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  const auto gpu = at::TensorOptions().dtype(at::kDouble).device(at::kCUDA, 0);
  const std::unique_ptr<memory::SwapTier> tier = cuda::make_pinned_swap_tier(0);
  memory::Swapper swapper(*tier);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    const at::Tensor ones = at::ones({8192, 8192}, gpu.dtype(at::kFloat));
    at::Tensor big = at::mm(ones, ones);  // queued on the compute stream; the copy out must wait for it
    const at::Tensor qkv = at::randn({64, 3, 32}, gpu);
    const at::Tensor want_qkv = qkv.cpu();
    memory::SwapTicket ticket = swapper.swap_out({big, qkv.select(1, 0), qkv.select(1, 2)});
    big = at::Tensor();
    swapper.drain();
    EXPECT_EQ(tier->host_live_bytes(), int64_t{8192} * 8192 * 4 + 64 * 3 * 32 * 8);
    const std::vector<at::Tensor> back = swapper.take(ticket);
    ASSERT_EQ(back.size(), 3u);
    EXPECT_TRUE(back[0].is_cuda() && back[1].is_cuda());
    EXPECT_EQ(back[0].min().item<float>(), 8192.0f);  // sums of ones: exact in float32
    EXPECT_EQ(back[0].max().item<float>(), 8192.0f);
    EXPECT_TRUE(at::equal(back[1].cpu(), want_qkv.select(1, 0)));
    EXPECT_TRUE(at::equal(back[2].cpu(), want_qkv.select(1, 2)));
    EXPECT_EQ(back[1].storage().data(), back[2].storage().data());
    EXPECT_EQ(tier->host_live_bytes(), 0);
  }
}

// NOTE [Step clock] on a GPU: marks around queued work settle into host times in mark order, no
// later than the settle, spanning the work: an 8192^3 float32 product (1.1 TFLOP) runs for
// milliseconds on any GPU, while queueing it takes microseconds, so a span of at least 1 ms shows
// the marks time the device, not the host's queueing.
TEST(Gpu, EventClockSettlesMarksOnTheHostClock) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  const std::unique_ptr<StepClock> clock = cuda::make_event_clock(0);
  const at::Tensor a = at::randn({8192, 8192}, at::TensorOptions().device(at::kCUDA, 0));
  const auto before = StepClock::Clock::now();
  for (int step = 0; step < 2; ++step) {
    const size_t first = clock->mark();
    const at::Tensor b = at::mm(a, a);
    const size_t second = clock->mark();
    EXPECT_EQ(first, 0u);
    EXPECT_EQ(second, 1u);
    const std::vector<StepClock::Clock::time_point> at = clock->settle();
    const auto after = StepClock::Clock::now();
    ASSERT_EQ(at.size(), 2u);
    EXPECT_GE(at[1] - at[0], std::chrono::milliseconds(1)) << "the product ran between the marks";
    EXPECT_LE(at[1], after);
    EXPECT_GE(at[0], before - std::chrono::milliseconds(1));
  }
}

// NOTE [Attention kernels] on a GPU: the fused (memory-efficient) kernel against the tiled one on
// the same device, forward and backward, and each backward after the other's forward (their
// log-sum-exps agree); float64 takes the tiled kernel.
TEST(Gpu, FusedAttentionMatchesTheTiledKernel) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  const nn::AttentionKernel fused{.kind = AttnKernel::Fused, .tile = 16}, tiled{.kind = AttnKernel::Tiled, .tile = 16};
  for (const auto type : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(type));
    const double tol = type == at::kFloat ? 1e-5 : 2e-2;
    at::manual_seed(11);
    const auto options = at::TensorOptions().dtype(type).device(at::kCUDA, 0);
    const at::Tensor q = at::randn({2, 3, 70, 32}, options), k = at::randn({2, 3, 70, 32}, options),
                     v = at::randn({2, 3, 70, 32}, options), dout = at::randn({2, 3, 70, 32}, options);
    ASSERT_TRUE(nn::runs_fused(fused, q, k, 0));
    const nn::AttentionForward f = nn::attention_forward(fused, q, k, v), t = nn::attention_forward(tiled, q, k, v);
    EXPECT_TENSOR_NEAR(f.out.cpu(), t.out.cpu(), tol);
    EXPECT_TENSOR_NEAR(f.lse.cpu(), t.lse.cpu(), tol);
    const nn::AttentionGrads gf = nn::attention_backward(fused, dout, q, k, v, f.out, f.lse);
    const nn::AttentionGrads gt = nn::attention_backward(tiled, dout, q, k, v, t.out, t.lse);
    const nn::AttentionGrads crossed = nn::attention_backward(fused, dout, q, k, v, t.out, t.lse);
    for (const nn::AttentionGrads* g : {&gf, &crossed}) {
      EXPECT_TENSOR_NEAR(g->dq.cpu(), gt.dq.cpu(), 10 * tol);
      EXPECT_TENSOR_NEAR(g->dk.cpu(), gt.dk.cpu(), 10 * tol);
      EXPECT_TENSOR_NEAR(g->dv.cpu(), gt.dv.cpu(), 10 * tol);
    }
  }
  const at::Tensor wide = at::randn({1, 2, 16, 32}, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA, 0));
  EXPECT_FALSE(nn::runs_fused(fused, wide, wide, 0));  // float64: the exact core
}

// NOTE [Device memory]: memory.budget on a GPU bounds its allocator, and lifting it frees the GPU
// again; a budget past the GPU's memory is refused by name before anything is allocated.
TEST(Gpu, MemoryBudgetBoundsTheGpusAllocator) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  const auto gpu = at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0);
  cuda::set_device_budget(0, int64_t{256} << 20);
  EXPECT_THROW((void)at::empty({int64_t{512} << 20}, gpu), c10::OutOfMemoryError);
  cuda::set_device_budget(0, 0);
  EXPECT_NO_THROW((void)at::empty({int64_t{512} << 20}, gpu));
  Config c = test::small_gpt(64, 1, 16, 4, 2);
  c.train.device = TrainDevice::Cuda;
  c.memory.budget = "100TiB";
  EXPECT_THAT(loom::testing::input_error([&] { train(c); }), ::testing::HasSubstr("memory.budget = \"100TiB\" is more than"));
}

// NOTE [NCCL backend] at world size 1: every collective against its closed form, on the GPU, in
// each type NCCL carries for loom, with the host twin carrying host tensors and tagged messages.
TEST(Gpu, NcclAtWorldSizeOneComputesEveryCollective) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  const std::unique_ptr<dist::DeviceBackend> backend = nccl::make_backend(60);
  ASSERT_EQ(backend->missing(), "");
  dist::NullCommunicator host;
  const std::unique_ptr<dist::Communicator> world = backend->connect(host, 0);
  const std::unique_ptr<dist::Communicator> split = world->split(0, 0, "tp");
  for (dist::Communicator* c : {world.get(), split.get()}) {
    for (const auto type : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong}) {
      SCOPED_TRACE(fmt::format("{} {}", c->axis(), c10::toString(type)));
      const auto on_gpu = at::TensorOptions().dtype(type).device(at::kCUDA, 0);
      const at::Tensor base = at::arange(1, 14, on_gpu);
      at::Tensor t = base.clone();
      c->all_reduce(t, dist::ReduceOp::Sum);
      EXPECT_TRUE(at::equal(t, base));
      c->all_reduce(t, dist::ReduceOp::Max);
      EXPECT_TRUE(at::equal(t, base));
      at::Tensor out = at::zeros_like(base);
      c->reduce_scatter(base, out, dist::ReduceOp::Sum);
      EXPECT_TRUE(at::equal(out, base));
      out.zero_();
      c->all_gather(base, out);
      EXPECT_TRUE(at::equal(out, base));
      out.zero_();
      c->all_to_all(base, out);
      EXPECT_TRUE(at::equal(out, base));
      out.zero_();
      c->all_to_allv(base, {13}, out, {13});
      EXPECT_TRUE(at::equal(out, base));
      at::Tensor b = base.clone();
      c->broadcast(b, 0);
      EXPECT_TRUE(at::equal(b, base));
    }
    // Stream order: the collective reads what the compute stream wrote before it, and what the
    // compute stream does after wait() sees its result (a large tensor, so a race would show).
    const auto big = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0);
    at::Tensor x = at::ones({int64_t{1} << 24}, big), gathered = at::zeros({int64_t{1} << 24}, big);
    x.mul_(3);
    c->all_gather_async(x, gathered)->wait();
    gathered.add_(1);
    EXPECT_EQ(gathered.min().item<float>(), 4.0f);
    EXPECT_EQ(gathered.max().item<float>(), 4.0f);
    at::Tensor host_sum = at::full({3}, 2.0, at::kDouble);  // a host tensor travels on the host twin
    c->all_reduce(host_sum, dist::ReduceOp::Avg);
    EXPECT_TRUE(at::equal(host_sum, at::full({3}, 2.0, at::kDouble)));
    at::Tensor avg = at::full({5}, 3.0, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA, 0));
    auto work = c->all_reduce_async(avg, dist::ReduceOp::Avg);
    work->wait();
    work->wait();  // idempotent
    EXPECT_TRUE(at::equal(avg.cpu(), at::full({5}, 3.0, at::kDouble)));
    c->barrier();
  }
  // A type NCCL does not carry for loom is refused by name.
  at::Tensor ints = at::ones({4}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, 0));
  EXPECT_THROW(world->all_reduce(ints, dist::ReduceOp::Sum), Error);
}

}  // namespace
}  // namespace loom
