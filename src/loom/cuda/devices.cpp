// loom built with CUDA: the runtime's devices, and the round trip through loom's kernel (scale.cu).
#include "loom/cuda/devices.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/cuda/cuda_check.h"
#include "loom/cuda/scale.h"

namespace loom::cuda {

Devices devices() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // the runtime keeps a sticky copy of a failed query; clear it
    return {.count = 0, .why_none = fmt::format("no usable GPU: {}", cudaGetErrorString(rc))};
  }
  if (count == 0) return {.count = 0, .why_none = "no GPU on this machine"};
  return {.count = count};
}

std::string load_torch_cuda() {
  // dlopen keeps one handle per library: a second call finds it loaded. RTLD_GLOBAL, so that the
  // kernels it registers with libtorch's dispatcher resolve the symbols they share with it.
  const std::string path = LOOM_TORCH_LIBRARY_DIR "/libtorch_cuda.so";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return "";
  const char* why = dlerror();
  return fmt::format("libtorch's CUDA library {} does not load: {}", path, why ? why : "(no reason given)");
}

void synchronize(int gpu) {
  check(cudaSetDevice(gpu), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

std::vector<float> scaled_on_device(const std::vector<float>& x, float a) {
  if (const Devices d = devices(); d.count == 0) throw Error(d.why_none);
  const size_t bytes = x.size() * sizeof(float);
  void* raw = nullptr;
  check(cudaMalloc(&raw, bytes), "cudaMalloc");
  auto* data = static_cast<float*>(raw);
  std::vector<float> y(x.size());
  try {
    check(cudaMemcpy(data, x.data(), bytes, cudaMemcpyHostToDevice), "copy to the device");
    check(scale_in_place(data, a, static_cast<int64_t>(x.size())), "the scale kernel");
    check(cudaMemcpy(y.data(), data, bytes, cudaMemcpyDeviceToHost), "copy to the host");
  } catch (...) {
    cudaFree(data);
    throw;
  }
  check(cudaFree(data), "cudaFree");
  return y;
}

}  // namespace loom::cuda
