#pragma once
// Measures the GEMM throughput of this process's libtorch threads, or of a GPU: the peak that MFU
// is reported against. A measurement, never an assertion.
#include <ATen/ATen.h>

#include <string_view>
#include <vector>

#include "loom/core/options.h"

namespace loom::plan {

struct GemmMeasurement {
  int64_t size;          // n of an n x n x n matmul
  double flops_per_s;    // median over repeats
  double best_flops_per_s;
  int64_t repeats;
};

// `products`: the path bfloat16 products take (NOTE [bf16 products]); a widened product is timed
// with its widening, so a plan prices bfloat16 at the speed the run gets.

// One size on `device`: warm up, then repeat until `min_seconds` have passed (on a GPU each
// repeat is several products between two waits for the device, so that the wait is not timed).
GemmMeasurement measure_gemm(int64_t size, at::ScalarType dtype, double min_seconds,
                             const at::Device& device = at::kCPU, Bf16Products products = Bf16Products::Native);
// The median FLOP/s of [m x k] x [k x n] products, timed as measure_gemm times a square one (the
// GEMM efficiency curve of `loom profile --cluster-out` needs thin ones).
double measure_gemm_rate(int64_t m, int64_t k, int64_t n, at::ScalarType dtype, double min_seconds,
                         const at::Device& device = at::kCPU, Bf16Products products = Bf16Products::Native);
// The best median over `sizes` on `device`: the peak MFU is computed against.
double measure_gemm_peak(at::ScalarType dtype, double min_seconds_per_size,
                         const std::vector<int64_t>& sizes = {512, 1024}, const at::Device& device = at::kCPU,
                         Bf16Products products = Bf16Products::Native);
// The sizes a peak is measured on for `device`: a GPU's peak needs far larger products.
std::vector<int64_t> gemm_peak_sizes(const at::Device& device);

// The peak measured several times, as a cluster file records it (NOTE [Cached cluster]).
struct PeakMeasurement {
  double flops_per_s = 0;  // the median of the repeats
  double spread = 0;       // (largest - smallest) / median: how far a busy host moved them
};
// The median and spread of repeated peaks (at least one).
PeakMeasurement summarise_peaks(const std::vector<double>& peaks);
// measure_gemm_peak `repeats` times, summarised.
PeakMeasurement measure_gemm_peak_repeated(at::ScalarType dtype, double min_seconds_per_size, int64_t repeats,
                                           const std::vector<int64_t>& sizes, const at::Device& device = at::kCPU,
                                           Bf16Products products = Bf16Products::Native);

}  // namespace loom::plan
