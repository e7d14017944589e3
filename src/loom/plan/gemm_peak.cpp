#include "loom/plan/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "loom/core/stats.h"
#include "loom/nn/products.h"

namespace loom::plan {

namespace {

// A device's kernels run after their launch returns: a run there is kLaunches products between
// two waits for the device (reading one element back), so that the wait's cost is shared out.
constexpr int kLaunches = 10;

// Waits until the device has finished the work queued on it (a host tensor: nothing to wait for).
void finish(const at::Tensor& c) {
  if (!c.is_cpu()) (void)c.view({-1})[0].item<double>();
}

// The sorted seconds of one [m x k] x [k x n] product on `device`: one warm-up, then at least
// three runs and until `min_seconds` have passed.
std::vector<double> time_gemm(int64_t m, int64_t k, int64_t n, at::ScalarType dtype, double min_seconds,
                              const at::Device& device, Bf16Products products) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor a = at::rand({m, k}, options), b = at::rand({k, n}, options);
  at::Tensor c = at::empty({m, n}, options);
  nn::matmul_into(c, a, b, products);  // warm-up: first-touch pages, thread pool start, the device's libraries
  finish(c);
  const int launches = device.is_cpu() ? 1 : kLaunches;
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    for (int i = 0; i < launches; ++i) nn::matmul_into(c, a, b, products);
    finish(c);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / launches);
  } while (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds || seconds.size() < 3);
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

double gemm_flops(int64_t m, int64_t k, int64_t n) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
}

}  // namespace

GemmMeasurement measure_gemm(int64_t size, at::ScalarType dtype, double min_seconds, const at::Device& device,
                             Bf16Products products) {
  const std::vector<double> seconds = time_gemm(size, size, size, dtype, min_seconds, device, products);
  const double flops = gemm_flops(size, size, size);
  return {size, flops / seconds[seconds.size() / 2], flops / seconds.front(), static_cast<int64_t>(seconds.size())};
}

double measure_gemm_rate(int64_t m, int64_t k, int64_t n, at::ScalarType dtype, double min_seconds,
                         const at::Device& device, Bf16Products products) {
  const std::vector<double> seconds = time_gemm(m, k, n, dtype, min_seconds, device, products);
  return gemm_flops(m, k, n) / seconds[seconds.size() / 2];
}

double measure_gemm_peak(at::ScalarType dtype, double min_seconds_per_size, const std::vector<int64_t>& sizes,
                         const at::Device& device, Bf16Products products) {
  double peak = 0;
  for (int64_t n : sizes)
    peak = std::max(peak, measure_gemm(n, dtype, min_seconds_per_size, device, products).flops_per_s);
  return peak;
}

std::vector<int64_t> gemm_peak_sizes(const at::Device& device) {
  if (device.is_cpu()) return {512, 1024};
  return {4096, 8192};  // a GPU reaches its peak only on products this large
}

PeakMeasurement summarise_peaks(const std::vector<double>& peaks) {
  const double middle = median(peaks);  // checks there is one
  const auto [low, high] = std::minmax_element(peaks.begin(), peaks.end());
  return {.flops_per_s = middle, .spread = middle > 0 ? (*high - *low) / middle : 0};
}

PeakMeasurement measure_gemm_peak_repeated(at::ScalarType dtype, double min_seconds_per_size, int64_t repeats,
                                           const std::vector<int64_t>& sizes, const at::Device& device,
                                           Bf16Products products) {
  std::vector<double> peaks;
  for (int64_t r = 0; r < std::max<int64_t>(1, repeats); ++r)
    peaks.push_back(measure_gemm_peak(dtype, min_seconds_per_size, sizes, device, products));
  return summarise_peaks(peaks);
}

}  // namespace loom::plan
