#pragma once
// loom's first CUDA kernel: x[i] *= a over n floats in device memory, on the current device's
// default stream; returns the launch's (and the stream's) status. Compiled by nvcc (scale.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda {

cudaError_t scale_in_place(float* x, float a, int64_t n);

}  // namespace loom::cuda
