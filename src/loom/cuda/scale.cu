#include "loom/cuda/scale.h"

namespace loom::cuda {
namespace {

__global__ void scale_kernel(float* x, float a, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] *= a;
}

}  // namespace

cudaError_t scale_in_place(float* x, float a, int64_t n) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(n / kThreads + 1 < 1024 ? n / kThreads + 1 : 1024);
  scale_kernel<<<blocks, kThreads>>>(x, a, n);
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  return cudaStreamSynchronize(nullptr);
}

}  // namespace loom::cuda
