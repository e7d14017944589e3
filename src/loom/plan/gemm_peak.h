#pragma once
// Measures the GEMM throughput of this process's libtorch threads: the peak that MFU is reported
// against. A measurement, never an assertion.
#include <ATen/ATen.h>

#include <vector>

namespace loom::plan {

struct GemmMeasurement {
  int64_t size;          // n of an n x n x n matmul
  double flops_per_s;    // median over repeats
  double best_flops_per_s;
  int64_t repeats;
};

// One size: warm up, then repeat until `min_seconds` have passed.
GemmMeasurement measure_gemm(int64_t size, at::ScalarType dtype, double min_seconds);
// The best median over `sizes`: the peak MFU is computed against.
double measure_gemm_peak(at::ScalarType dtype, double min_seconds_per_size,
                         const std::vector<int64_t>& sizes = {512, 1024});

}  // namespace loom::plan
