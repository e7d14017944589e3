// loom's own CUDA code (src/loom/cuda): its kernel on a GPU where one exists, skipped with the
// reason where none does (a build without CUDA, a machine without a driver or GPU). Tests that need a
// GPU are the suite Gpu, which ctest labels `gpu` (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <vector>

#include "loom/core/build_info.h"
#include "loom/core/error.h"
#include "loom/cuda/devices.h"

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

}  // namespace
}  // namespace loom
