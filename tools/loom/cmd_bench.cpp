#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <thread>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/cuda/devices.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/plan/gemm_peak.h"

namespace loom::cli {

namespace {

// --device: the CPU, or GPU 0 with libtorch's CUDA library loaded (InputError where there is none).
at::Device bench_device(const std::string& name) {
  LOOM_CHECK_INPUT(name == "cpu" || name == "cuda", "--device \"{}\" is not one of: cpu, cuda", name);
  if (name == "cpu") return at::kCPU;
  const cuda::Devices d = cuda::devices();
  LOOM_CHECK_INPUT(d.count > 0, "--device cuda, but there is no GPU to measure: {}; hint: --device cpu", d.why_none);
  const std::string why = cuda::load_torch_cuda();
  LOOM_CHECK_INPUT(why.empty(), "--device cuda, but {}; hint: --device cpu", why);
  return {at::kCUDA, 0};
}

}  // namespace

Action add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "micro-benchmarks");
  cmd->require_subcommand(1);
  auto* gemm = cmd->add_subcommand("gemm", "measure the peak GEMM FLOP/s that MFU is computed against");
  struct Options {
    std::vector<int64_t> sizes{256, 512, 1024, 2048};
    double seconds = 0.5;
    std::string dtype = "float32";
    int threads = 0;
    std::string device = "cpu";
    std::string bf16_products = "auto";
  };
  auto o = std::make_shared<Options>();
  gemm->add_option("--sizes", o->sizes, "matrix sizes n (n x n x n)");
  gemm->add_option("--seconds", o->seconds, "minimum time per size");
  gemm->add_option("--dtype", o->dtype, "float32 | float64 | bfloat16 (the type MFU is measured against)");
  gemm->add_option("--threads", o->threads, "libtorch threads (0 = all cores)");
  auto* sizes_option = gemm->get_option("--sizes");
  gemm->add_option("--device", o->device, "cpu | cuda (GPU 0 of those CUDA_VISIBLE_DEVICES shows)");
  gemm->add_option("--bf16-products", o->bf16_products,
                   "auto | native | widened: the path bfloat16 products take (model.bf16_products)");
  return [gemm, o, sizes_option](dist::Runtime&) {
    if (!*gemm) return;
    const DType type = option_from<DType>("--dtype", o->dtype);
    const at::Device device = bench_device(o->device);
    if (!device.is_cpu() && sizes_option->count() == 0) o->sizes = {1024, 2048, 4096, 8192};
    LOOM_CHECK_INPUT(o->seconds > 0, "--seconds {} must be positive", o->seconds);
    for (int64_t n : o->sizes) LOOM_CHECK_INPUT(n > 0, "--sizes: {} is not a positive size", n);
    at::set_num_threads(o->threads > 0 ? o->threads : static_cast<int>(std::thread::hardware_concurrency()));
    const auto dtype = nn::activation_type(type);  // the type the products of such a model run in
    // bfloat16 on the path a run here takes (NOTE [bf16 products]), or the one --bf16-products names.
    const nn::Bf16Choice products =
        nn::choose_bf16_products(option_from<Bf16Products>("--bf16-products", o->bf16_products), nn::this_cpu(),
                                 !device.is_cpu());
    if (type == DType::BFloat16) std::cerr << "loom: bf16 products: " << products.reason << '\n';
    double peak = 0;
    nlohmann::json sizes = nlohmann::json::array();
    for (int64_t n : o->sizes) {
      const auto m = plan::measure_gemm(n, dtype, o->seconds, device, products.path);
      peak = std::max(peak, m.flops_per_s);
      std::cerr << fmt::format("gemm n={:<5} {:8.2f} GFLOP/s median, {:8.2f} best, {} repeats\n", n,
                               m.flops_per_s / 1e9, m.best_flops_per_s / 1e9, m.repeats);
      sizes.push_back({{"n", n}, {"flops_per_s", m.flops_per_s}, {"best_flops_per_s", m.best_flops_per_s}});
    }
    std::cout << nlohmann::json{{"bench", "gemm"}, {"dtype", o->dtype}, {"device", device.str()},
                                {"bf16_products", std::string(type == DType::BFloat16 ? name_of(products.path) : "native")},
                                {"threads", at::get_num_threads()},
                                {"peak_flops_per_s", peak}, {"sizes", sizes}}.dump()
              << '\n';
  };
}

}  // namespace loom::cli
