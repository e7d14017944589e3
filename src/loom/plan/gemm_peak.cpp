#include "loom/plan/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "loom/core/cpu_flags.h"
#include "loom/core/stats.h"

namespace loom::plan {

namespace {

// The sorted seconds of one [m x k] x [k x n] product: one warm-up, then at least three runs and
// until `min_seconds` have passed.
std::vector<double> time_gemm(int64_t m, int64_t k, int64_t n, at::ScalarType dtype, double min_seconds) {
  const auto options = at::TensorOptions().dtype(dtype);
  const at::Tensor a = at::rand({m, k}, options), b = at::rand({k, n}, options);
  at::Tensor c = at::empty({m, n}, options);
  at::mm_out(c, a, b);  // warm-up: first-touch pages, thread pool start
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    at::mm_out(c, a, b);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds || seconds.size() < 3);
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

double gemm_flops(int64_t m, int64_t k, int64_t n) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
}

}  // namespace

GemmMeasurement measure_gemm(int64_t size, at::ScalarType dtype, double min_seconds) {
  const std::vector<double> seconds = time_gemm(size, size, size, dtype, min_seconds);
  const double flops = gemm_flops(size, size, size);
  return {size, flops / seconds[seconds.size() / 2], flops / seconds.front(), static_cast<int64_t>(seconds.size())};
}

double measure_gemm_rate(int64_t m, int64_t k, int64_t n, at::ScalarType dtype, double min_seconds) {
  const std::vector<double> seconds = time_gemm(m, k, n, dtype, min_seconds);
  return gemm_flops(m, k, n) / seconds[seconds.size() / 2];
}

double measure_gemm_peak(at::ScalarType dtype, double min_seconds_per_size, const std::vector<int64_t>& sizes) {
  double peak = 0;
  for (int64_t n : sizes) peak = std::max(peak, measure_gemm(n, dtype, min_seconds_per_size).flops_per_s);
  return peak;
}

PeakMeasurement summarise_peaks(const std::vector<double>& peaks) {
  const double middle = median(peaks);  // checks there is one
  const auto [low, high] = std::minmax_element(peaks.begin(), peaks.end());
  return {.flops_per_s = middle, .spread = middle > 0 ? (*high - *low) / middle : 0};
}

PeakMeasurement measure_gemm_peak_repeated(at::ScalarType dtype, double min_seconds_per_size, int64_t repeats,
                                           const std::vector<int64_t>& sizes) {
  std::vector<double> peaks;
  for (int64_t r = 0; r < std::max<int64_t>(1, repeats); ++r)
    peaks.push_back(measure_gemm_peak(dtype, min_seconds_per_size, sizes));
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
