// loom's own CUDA code (src/loom/cuda): its kernel on a GPU where one exists, skipped with the
// reason where none does (a build without CUDA, a machine without a driver or GPU). Tests that need a
// GPU are the suite Gpu, which ctest labels `gpu` (tests/CMakeLists.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <vector>

#include "loom/core/build_info.h"
#include "loom/core/error.h"
#include "loom/cuda/devices.h"
#include "loom/cuda/placement.h"
#include "unit/input_error.h"

namespace loom {
namespace {

TEST(Gpu, LoomKernelScalesOnTheDevice) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  std::vector<float> x(100003);  // not a multiple of the block size, more than one block
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 50000.5f;
  const std::vector<float> y = cuda::scaled_on_device(x, -0.25f);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] * -0.25f) << i;  // one exact product each
}

// libtorch on the GPU, its CUDA library loaded on demand: a tensor made, computed and copied back.
TEST(Gpu, LibtorchComputesOnTheDeviceOnceLoaded) {
  const cuda::Devices d = cuda::devices();
  if (d.count == 0) GTEST_SKIP() << d.why_none;
  ASSERT_EQ(cuda::load_torch_cuda(), "");
  const at::Tensor x = at::arange(5, at::dtype(at::kDouble).device(at::kCUDA));
  EXPECT_TRUE(at::equal((x * 0.5).cpu(), at::arange(5, at::kDouble) * 0.5));
}

// Where this build has CUDA, libtorch's CUDA half loads whether or not a GPU is here: its CUDA
// device guard is registered by it, and a second load finds it loaded.
TEST(Cuda, LibtorchCudaLoadsOnDemand) {
  const std::string why = cuda::load_torch_cuda();
  if (build_info().cuda.empty()) {
    EXPECT_NE(why.find("loom was built without CUDA"), std::string::npos) << why;
    return;
  }
  if (build_info().torch_cuda.empty()) GTEST_SKIP() << "the libtorch loaded has no CUDA: " << why;
  ASSERT_EQ(why, "");
  EXPECT_TRUE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));
  EXPECT_EQ(cuda::load_torch_cuda(), "");
}

TEST(Cuda, NoDeviceSaysWhyAndRefusesWork) {
  const cuda::Devices d = cuda::devices();
  if (d.count > 0) GTEST_SKIP() << d.count << " GPU(s) here: nothing to refuse";
  EXPECT_FALSE(d.why_none.empty());
  EXPECT_THROW(cuda::scaled_on_device({1.0f}, 2.0f), Error);
}

TEST(BuildInfo, NamesTheLibtorchItRunsOn) {
  const BuildInfo b = build_info();
  EXPECT_EQ(b.torch_running, b.torch_built);  // the wheel's libtorch, the same headers
  EXPECT_EQ(b.torch_running.substr(0, 2), "2.");
  EXPECT_FALSE(b.torch_blas.empty());
  const std::string text = version_text(b);
  EXPECT_EQ(text.substr(0, text.find('\n')), "loom " + b.loom);
  EXPECT_NE(text.find("libtorch " + b.torch_running), std::string::npos) << text;
  // Whether MPI is built in (LOOM_MPI) is checked against the binary's libraries by cli.smoke.
  EXPECT_NE(build_line(b).find(b.mpi ? "MPI yes" : "MPI no"), std::string::npos);
}

// NOTE [Devices]: train.device and parallel.backend resolved per rank from what the node shows.
Config placed(TrainDevice device, Backend backend) {
  Config c;
  c.train.device = device;
  c.parallel.backend = backend;
  return c;
}

constexpr const char* kNoGpu = "no GPU on this machine";

cuda::NodeView node(int local_rank, int local_ranks, int gpus, bool nccl) {
  return {.local_rank = local_rank,
          .local_ranks = local_ranks,
          .devices = {.count = gpus, .why_none = gpus == 0 ? kNoGpu : ""},
          .nccl_missing = nccl ? "" : "it was built without one"};
}

TEST(Placement, AutoTakesAGpuWhereOneIsUsableAndNcclWhereItCanRun) {
  using cuda::Placement;
  const Config automatic = placed(TrainDevice::Auto, Backend::Auto);
  EXPECT_EQ(cuda::place_rank(automatic, node(0, 1, 0, true)), (Placement{TrainDevice::Cpu, -1, Backend::Mpi}));
  EXPECT_EQ(cuda::place_rank(automatic, node(3, 4, 4, true)), (Placement{TrainDevice::Cuda, 3, Backend::Nccl}));
  // More ranks than GPUs, or no NCCL: MPI through host buffers, ranks sharing GPUs in turn.
  EXPECT_EQ(cuda::place_rank(automatic, node(3, 4, 2, true)), (Placement{TrainDevice::Cuda, 1, Backend::Mpi}));
  EXPECT_EQ(cuda::place_rank(automatic, node(1, 2, 2, false)), (Placement{TrainDevice::Cuda, 1, Backend::Mpi}));
  // "cpu" stays on the CPU whatever the node has; "mpi" is kept on a GPU.
  EXPECT_EQ(cuda::place_rank(placed(TrainDevice::Cpu, Backend::Auto), node(0, 1, 8, true)),
            (Placement{TrainDevice::Cpu, -1, Backend::Mpi}));
  EXPECT_EQ(cuda::place_rank(placed(TrainDevice::Cuda, Backend::Mpi), node(5, 8, 8, true)),
            (Placement{TrainDevice::Cuda, 5, Backend::Mpi}));
}

TEST(Placement, RefusesWhatTheNodeCannotRun) {
  using ::testing::HasSubstr;
  using loom::testing::input_error;
  EXPECT_THAT(input_error([] { cuda::place_rank(placed(TrainDevice::Cuda, Backend::Auto), node(0, 1, 0, true)); }),
              HasSubstr("train.device = \"cuda\", but this rank has no GPU to train on: no GPU on this machine; "
                        "hint: train.device = \"cpu\""));
  EXPECT_THAT(input_error([] { cuda::place_rank(placed(TrainDevice::Auto, Backend::Nccl), node(0, 1, 0, true)); }),
              HasSubstr("parallel.backend = \"nccl\" carries GPU tensors, but train.device = \"auto\" trains on "
                        "the CPU here (no GPU on this machine)"));
  EXPECT_THAT(input_error([] { cuda::place_rank(placed(TrainDevice::Cuda, Backend::Nccl), node(0, 4, 2, true)); }),
              HasSubstr("parallel.backend = \"nccl\" needs a GPU per rank, but 4 ranks of the job run on this "
                        "node and it shows 2 GPUs"));
  EXPECT_THAT(input_error([] { cuda::place_rank(placed(TrainDevice::Cuda, Backend::Nccl), node(0, 1, 1, false)); }),
              HasSubstr("parallel.backend = \"nccl\", but NCCL cannot run here: it was built without one"));
  // A config that asks for NCCL on the CPU is refused before any node is looked at.
  EXPECT_THAT(input_error([] { validate(placed(TrainDevice::Cpu, Backend::Nccl)); }),
              HasSubstr("parallel.backend = \"nccl\" carries GPU tensors, but train.device = \"cpu\""));
  // What a GPU rank cannot run is refused by name, before anything is loaded or allocated.
  const cuda::Placement gpu{TrainDevice::Cuda, 0, Backend::Mpi};
  Config sparse = placed(TrainDevice::Cuda, Backend::Mpi);
  sparse.parallel.sparse = SparseMode::On;
  EXPECT_THAT(input_error([&] { cuda::check_trainable(sparse, gpu); }), HasSubstr("parallel.sparse = \"on\", but"));
  Config lazy = placed(TrainDevice::Cuda, Backend::Mpi);
  lazy.train.table_update = TableUpdate::Lazy;
  EXPECT_THAT(input_error([&] { cuda::check_trainable(lazy, gpu); }), HasSubstr("train.table_update = \"lazy\", but"));
  EXPECT_NO_THROW(cuda::check_trainable(sparse, {}));  // the CPU runs them all
  EXPECT_NO_THROW(cuda::check_trainable(lazy, {}));
  // "cpu" resolves on any node, whatever its GPUs (place_this_rank does not ask for them).
  // Nor does it ask whether NCCL can run.
  const auto unasked = []() -> std::string { throw Error("NCCL asked about on a CPU rank"); };
  EXPECT_EQ(cuda::place_this_rank(placed(TrainDevice::Cpu, Backend::Auto), 0, 1, unasked), cuda::Placement{});
}

}  // namespace
}  // namespace loom
