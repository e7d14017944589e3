// NOTE [Swap tier] on a GPU: pinned host blocks and a copy stream.
#include "loom/cuda/pinned_swap_tier.h"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/cuda/cuda_check.h"
#include "loom/memory/block_pool.h"

namespace loom::cuda {
namespace {

class PinnedSwapTier final : public memory::SwapTier {
 public:
  explicit PinnedSwapTier(int gpu)
      : gpu_(gpu),
        pool_(memory::BlockPool::make(
            [gpu](size_t bytes) -> void* {  // on the Swapper's thread: its device first (no context on GPU 0)
              void* p = nullptr;
              if (cudaSetDevice(gpu) != cudaSuccess) return nullptr;
              return cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess ? p : nullptr;
            },
            [](void* p) { cudaFreeHost(p); }, "pinned host memory for the swap tier")) {
    check(cudaSetDevice(gpu_), "cudaSetDevice");
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    if (const cudaError_t rc = cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking); rc != cudaSuccess) {
      cudaEventDestroy(ready_);
      check(rc, "cudaStreamCreateWithFlags");
    }
  }
  ~PinnedSwapTier() override {
    cudaEventDestroy(ready_);
    cudaStreamDestroy(copies_);
  }
  PinnedSwapTier(const PinnedSwapTier&) = delete;
  PinnedSwapTier& operator=(const PinnedSwapTier&) = delete;

  at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) override { return pool_->take(sizes, dtype); }
  at::Tensor device_empty(at::IntArrayRef sizes, at::ScalarType dtype) override {
    return at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu_)));
  }
  void copy(const at::Tensor& dst, const at::Tensor& src) override {
    LOOM_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(),
               "[swap] a copy of {} bytes into {} bytes", src.nbytes(), dst.nbytes());
    check(cudaSetDevice(gpu_), "cudaSetDevice");  // the Swapper's thread
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(gpu_)).stream();
    check(cudaEventRecord(ready_, compute), "cudaEventRecord");
    check(cudaStreamWaitEvent(copies_, ready_, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDefault, copies_), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(copies_), "cudaStreamSynchronize");
  }
  int64_t host_live_bytes() const override { return pool_->live_bytes(); }
  int64_t host_peak_bytes() const override { return pool_->peak_bytes(); }
  void reset_host_peak() override { pool_->reset_peak(); }

 private:
  int gpu_;
  std::shared_ptr<memory::BlockPool> pool_;
  cudaStream_t copies_ = nullptr;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

std::unique_ptr<memory::SwapTier> make_pinned_swap_tier(int gpu) { return std::make_unique<PinnedSwapTier>(gpu); }

}  // namespace loom::cuda
