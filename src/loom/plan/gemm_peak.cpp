#include "loom/plan/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "loom/core/cpu_flags.h"
#include "loom/core/stats.h"

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
                              const at::Device& device) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor a = at::rand({m, k}, options), b = at::rand({k, n}, options);
  at::Tensor c = at::empty({m, n}, options);
  at::mm_out(c, a, b);  // warm-up: first-touch pages, thread pool start, the device's libraries
  finish(c);
  const int launches = device.is_cpu() ? 1 : kLaunches;
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    for (int i = 0; i < launches; ++i) at::mm_out(c, a, b);
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

GemmMeasurement measure_gemm(int64_t size, at::ScalarType dtype, double min_seconds, const at::Device& device) {
  const std::vector<double> seconds = time_gemm(size, size, size, dtype, min_seconds, device);
  const double flops = gemm_flops(size, size, size);
  return {size, flops / seconds[seconds.size() / 2], flops / seconds.front(), static_cast<int64_t>(seconds.size())};
}

double measure_gemm_rate(int64_t m, int64_t k, int64_t n, at::ScalarType dtype, double min_seconds,
                         const at::Device& device) {
  const std::vector<double> seconds = time_gemm(m, k, n, dtype, min_seconds, device);
  return gemm_flops(m, k, n) / seconds[seconds.size() / 2];
}

double measure_gemm_peak(at::ScalarType dtype, double min_seconds_per_size, const std::vector<int64_t>& sizes,
                         const at::Device& device) {
  double peak = 0;
  for (int64_t n : sizes) peak = std::max(peak, measure_gemm(n, dtype, min_seconds_per_size, device).flops_per_s);
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
                                           const std::vector<int64_t>& sizes, const at::Device& device) {
  std::vector<double> peaks;
  for (int64_t r = 0; r < std::max<int64_t>(1, repeats); ++r)
    peaks.push_back(measure_gemm_peak(dtype, min_seconds_per_size, sizes, device));
  return summarise_peaks(peaks);
}

namespace {
bool has_native_bfloat16(const std::set<std::string>& flags) {
  return flags.count("avx512_bf16") > 0 || flags.count("amx_bf16") > 0;
}
}  // namespace

bool cpuinfo_has_native_bfloat16(std::string_view cpuinfo) { return has_native_bfloat16(cpu_flags_in(cpuinfo)); }

bool native_bfloat16() { return has_native_bfloat16(cpu_flags()); }

std::string bfloat16_speed_warning() {
  if (native_bfloat16()) return "";
  return "model.dtype = \"bfloat16\": this CPU has no native bfloat16 products (neither avx512_bf16 nor amx_bf16 "
         "in /proc/cpuinfo), so libtorch emulates them and they run slower than float32; hint: train in "
         "\"float32\" here, or compare with `loom bench gemm --dtype bfloat16`";
}

}  // namespace loom::plan
