#pragma once
// NOTE [bf16 products]
// Under model.dtype = "bfloat16" every matrix product takes bfloat16 operands (NOTE [Mixed
// precision]). How a rank multiplies them is chosen once, at start, from what its CPU can do
// (choose_bf16_products), never from a timing:
// - native: libtorch's bfloat16 kernels. Fast only where the CPU has bfloat16 dot-product
//   instructions (avx512_bf16, amx_bf16) and libtorch's oneDNN may use them; elsewhere libtorch
//   falls back to a scalar loop, some 1/85 of float32's speed on an AVX2-only CPU.
// - widened: the operands are read in bfloat16, widened to float32 a block at a time (so the
//   float32 copies stay 16 MiB each whatever the tensor), multiplied by the float32 GEMM and the
//   result rounded to bfloat16 once; a weight gradient's product is added in float32 to its
//   float32 accumulator without being rounded at all. Attention runs its float32 kernel on
//   widened queries, keys and values. Parameters, activations, messages and checkpoints stay
//   bfloat16, so memory and traffic are those of native; the results differ from native only by
//   the order of float32 sums and the roundings native makes and widened skips.
// A GPU multiplies bfloat16 natively: its products never widen. Float32 and float64 operands are
// multiplied as they are on either path, so float64 runs are bit-for-bit what they were.
// Every product of a layer goes through this file, with the path its rank chose: the layers'
// parameters carry it (Param::products, set once after a model is built: set_products), the
// attention kernel carries it (AttentionKernel::products, from model.bf16_products resolved).
#include <ATen/ATen.h>

#include <set>
#include <string>
#include <vector>

#include "loom/core/options.h"

namespace loom::nn {

struct Param;

// What decides the path: the CPU's flags (/proc/cpuinfo), whether libtorch has oneDNN (its only
// CPU kernels that use bfloat16 instructions), and oneDNN's ISA cap from the environment.
struct CpuFacts {
  std::set<std::string> flags;
  bool onednn = true;
  std::string onednn_cap_variable;  // ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA, where one is set
  std::string onednn_cap;           // its value ("AVX2"); empty: no cap
};
CpuFacts this_cpu();

struct Bf16Choice {
  Bf16Products path = Bf16Products::Native;  // never Auto
  std::string reason;                        // why, for the run header and `loom --version`
  bool operator==(const Bf16Choice&) const = default;
};
// The path for `asked` on a rank whose device is a GPU (`gpu`) or this CPU. InputError for
// "native" on a CPU without bfloat16 instructions, and for "widened" on a GPU.
Bf16Choice choose_bf16_products(Bf16Products asked, const CpuFacts& cpu, bool gpu);
// Sets the path every parameter's products take (Param::products).
void set_products(const std::vector<Param*>& params, Bf16Products path);

// Whether a product of operands like `t` widens on `path`: bfloat16 CPU tensors on "widened".
bool widens(Bf16Products path, const at::Tensor& t);
// How many rows of `row_elements` each a widened block holds: 16 MiB of float32, at least one.
int64_t widened_block_rows(int64_t row_elements);

// a @ b for a [..., k] and a 2-d b [k, n], in a's type.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, Bf16Products path);
// The same into `out` [..., n] (a view is fine).
void matmul_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, Bf16Products path);
// x @ w^T (+ bias) for x [..., in] and w [out, in]: a linear layer's forward.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, Bf16Products path);
// a @ b for 2-d or batched 3-d operands, in wide_type(a's type): on the native path the product
// rounded to a's type and widened, on the widened path the float32 product as it is.
at::Tensor product_wide(const at::Tensor& a, const at::Tensor& b, Bf16Products path);
// acc += alpha * (a @ b), for 2-d or batched 3-d operands of one type; acc (possibly a view) may
// be wider, and then takes the product rounded once (on the widened path: not rounded at all).
void add_product(const at::Tensor& acc, const at::Tensor& a, const at::Tensor& b, Bf16Products path,
                 double alpha = 1.0);

}  // namespace loom::nn
