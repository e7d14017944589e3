#include "loom/nn/products.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "loom/core/cpu_flags.h"
#include "loom/core/error.h"
#include "loom/nn/param.h"
#include "loom/nn/precision.h"

namespace loom::nn {
namespace {

// The CPU's bfloat16 dot-product instructions among its flags.
std::vector<std::string> bf16_instructions(const std::set<std::string>& flags) {
  std::vector<std::string> found;
  for (const char* f : {"amx_bf16", "avx512_bf16"})
    if (flags.count(f) > 0) found.emplace_back(f);
  return found;
}

// Whether oneDNN's ISA cap still lets it use bfloat16 dot products: the caps from
// AVX512_CORE_BF16 up (the AMX, FP16 and AVX10 ones include it), or none.
bool cap_allows_bf16(std::string cap) {
  std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char c) { return std::toupper(c); });
  if (cap.empty() || cap == "ALL" || cap == "DEFAULT") return true;
  for (const char* part : {"BF16", "AMX", "FP16", "AVX10"})
    if (cap.find(part) != std::string::npos) return true;
  return false;
}

const char* const kNoInstructions = "neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo";

}  // namespace

CpuFacts this_cpu() {
  CpuFacts cpu{.flags = cpu_flags(), .onednn = at::hasMKLDNN()};
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
    if (const char* cap = std::getenv(name); cap != nullptr && *cap != '\0') {
      cpu.onednn_cap_variable = name;
      cpu.onednn_cap = cap;
      break;
    }
  return cpu;
}

Bf16Choice choose_bf16_products(Bf16Products asked, const CpuFacts& cpu, bool gpu) {
  if (gpu) {
    LOOM_CHECK_INPUT(asked != Bf16Products::Widened,
                     "model.bf16_products = \"widened\" applies to CPU ranks, and this rank's device is a GPU, "
                     "which multiplies bfloat16 natively; hint: leave model.bf16_products at \"auto\"");
    return {Bf16Products::Native, "native: a GPU multiplies bfloat16 in its own kernels"};
  }
  if (asked == Bf16Products::Widened)
    return {Bf16Products::Widened, "widened to float32: model.bf16_products = \"widened\""};
  const std::vector<std::string> found = bf16_instructions(cpu.flags);
  std::string why;
  if (found.empty())
    why = fmt::format("this CPU has no bfloat16 dot-product instructions ({})", kNoInstructions);
  else if (!cpu.onednn)
    why = "this libtorch is built without oneDNN, its only kernels that use this CPU's bfloat16 instructions";
  else if (!cap_allows_bf16(cpu.onednn_cap))
    why = fmt::format("{} = {} keeps libtorch's oneDNN from this CPU's bfloat16 instructions", cpu.onednn_cap_variable,
                      cpu.onednn_cap);
  if (asked == Bf16Products::Native) {
    LOOM_CHECK_INPUT(why.empty(),
                     "model.bf16_products = \"native\", but {}: libtorch would multiply bfloat16 in a scalar loop, "
                     "some 20x slower than float32; hint: leave model.bf16_products at \"auto\" (widened to "
                     "float32 here: the same memory and traffic as native)", why);
    return {Bf16Products::Native, fmt::format("native: model.bf16_products = \"native\" ({})", fmt::join(found, ", "))};
  }
  if (!why.empty()) return {Bf16Products::Widened, "widened to float32: " + why};
  return {Bf16Products::Native, fmt::format("native: this CPU has bfloat16 dot-product instructions ({})",
                                            fmt::join(found, ", "))};
}

void set_products(const std::vector<Param*>& params, Bf16Products path) {
  for (Param* p : params) p->products = path;
}

bool widens(Bf16Products path, const at::Tensor& t) {
  return path == Bf16Products::Widened && t.scalar_type() == at::kBFloat16 && t.device().is_cpu();
}

namespace {

// The float32 elements of one widened block: 16 MiB, whatever the operand. Smaller blocks cost
// speed: a micro-batch's product cut into 512-wide pieces ran 7% slower, a weight gradient summed
// over 372-token pieces more; at this size such products are one block.
constexpr int64_t kBlockElements = int64_t{1} << 22;
// Rows (or columns) of a block whose other side has `other` elements; at least 256, where the
// float32 GEMM runs near its peak.
int64_t block_of(int64_t other) { return std::max<int64_t>(256, kBlockElements / std::max<int64_t>(1, other)); }

// out [m, n] (any type and strides) = a [m, k] @ b [k, n] (+ bias [n]), a and b widened to float32
// a block at a time, each block of the result rounded to out's type once.
void widened_product(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const int64_t rows = std::min(m, block_of(k)), cols = block_of(std::max(k, rows));  // the result's block too
  const bool b_whole = k * n <= kBlockElements;  // widened once, then read by every row block
  const at::Tensor b_wide = b_whole ? b.to(at::kFloat) : at::Tensor();
  const at::Tensor bias_wide = bias.defined() ? bias.to(at::kFloat) : at::Tensor();
  for (int64_t r = 0; r < m; r += rows) {
    const int64_t rn = std::min(rows, m - r);
    const at::Tensor a_wide = a.narrow(0, r, rn).to(at::kFloat);
    for (int64_t c = 0; c < n; c += cols) {
      const int64_t cn = std::min(cols, n - c);
      const at::Tensor bw = b_whole ? b_wide.narrow(1, c, cn) : b.narrow(1, c, cn).to(at::kFloat);
      const at::Tensor block = bias_wide.defined() ? at::addmm(bias_wide.narrow(0, c, cn), a_wide, bw) : at::mm(a_wide, bw);
      out.narrow(0, r, rn).narrow(1, c, cn).copy_(block);
    }
  }
}

std::vector<int64_t> rows_by(const at::Tensor& a, int64_t n) {
  std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end());
  shape.back() = n;
  return shape;
}

}  // namespace

int64_t widened_block_rows(int64_t row_elements) { return std::max<int64_t>(1, kBlockElements / std::max<int64_t>(1, row_elements)); }

void matmul_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, Bf16Products path) {
  if (!widens(path, a)) {
    at::Tensor into = out;
    at::matmul_out(into, a, b);
    return;
  }
  const int64_t k = a.size(-1), n = b.size(1);
  widened_product(out.dim() == 2 ? out : out.view({-1, n}), a.reshape({-1, k}), b, at::Tensor());
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, Bf16Products path) {
  if (!widens(path, a)) return at::matmul(a, b);
  at::Tensor out = at::empty(rows_by(a, b.size(1)), a.options());
  matmul_into(out, a, b, path);
  return out;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, Bf16Products path) {
  if (!widens(path, x)) return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
  at::Tensor out = at::empty(rows_by(x, w.size(0)), x.options());
  widened_product(out.view({-1, w.size(0)}), x.reshape({-1, x.size(-1)}), w.t(), bias);
  return out;
}

at::Tensor product_wide(const at::Tensor& a, const at::Tensor& b, Bf16Products path) {
  const bool batched = a.dim() == 3;
  if (!widens(path, a)) return widen(batched ? at::bmm(a, b) : at::mm(a, b));
  if (batched) return at::bmm(a.to(at::kFloat), b.to(at::kFloat));
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kFloat));
  widened_product(out, a, b, at::Tensor());
  return out;
}

void add_product(const at::Tensor& acc, const at::Tensor& a, const at::Tensor& b, Bf16Products path, double alpha) {
  const bool batched = a.dim() == 3;
  if (widens(path, a)) {
    if (batched) {
      acc.add_(at::bmm(a.to(at::kFloat), b.to(at::kFloat)), alpha);
      return;
    }
    // A block of the contraction at a time, summed in float32: into acc itself when it is float32
    // (a weight gradient), else into one float32 sum rounded once into acc.
    const int64_t k = a.size(1), step = block_of(std::max(a.size(0), b.size(1)));
    const bool wide_acc = acc.scalar_type() == at::kFloat;
    at::Tensor sum = wide_acc ? acc : at::zeros(acc.sizes(), acc.options().dtype(at::kFloat));
    for (int64_t c = 0; c < k; c += step) {
      const int64_t cn = std::min(step, k - c);
      sum.addmm_(a.narrow(1, c, cn).to(at::kFloat), b.narrow(0, c, cn).to(at::kFloat), 1.0, wide_acc ? alpha : 1.0);
    }
    if (!wide_acc) acc.add_(sum, alpha);
    return;
  }
  if (acc.scalar_type() == a.scalar_type()) {
    if (batched) acc.baddbmm_(a, b, 1.0, alpha);
    else acc.addmm_(a, b, 1.0, alpha);
    return;
  }
  acc.add_(batched ? at::bmm(a, b) : at::mm(a, b), alpha);
}

}  // namespace loom::nn
