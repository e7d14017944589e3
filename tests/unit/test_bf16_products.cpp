// The bf16 products' paths (NOTE [bf16 products]): which one a CPU gets and why, and that the
// widened path computes what it says (bfloat16 operands, float32 products, one rounding) across
// its block boundaries, for every product a layer makes.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/cpu_flags.h"
#include "loom/core/error.h"
#include "loom/nn/attention.h"
#include "loom/nn/products.h"

namespace loom::nn {
namespace {

constexpr double kUnitRoundoff = 1.0 / 256;  // bfloat16: 2^-8

CpuFacts cpu_with(const char* flags_line, std::string cap = "") {
  return {.flags = cpu_flags_in(flags_line), .onednn = true,
          .onednn_cap_variable = cap.empty() ? "" : "ONEDNN_MAX_CPU_ISA", .onednn_cap = cap};
}

const char* const kZen2 = "flags\t\t: fpu sse sse2 avx avx2 fma bmi2\n";
const char* const kZen4 = "flags\t\t: fpu avx2 avx512f avx512bw avx512vl avx512_bf16\n";
const char* const kSapphireRapids = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n";

TEST(Bf16Choice, AutoIsNativeOnlyWhereTheCpuHasBf16Instructions) {
  const Bf16Choice zen2 = choose_bf16_products(Bf16Products::Auto, cpu_with(kZen2), false);
  EXPECT_EQ(zen2.path, Bf16Products::Widened);
  EXPECT_EQ(zen2.reason, "widened to float32: this CPU has no bfloat16 dot-product instructions (neither "
                         "avx512_bf16 nor amx_bf16 in /proc/cpuinfo)");
  const Bf16Choice zen4 = choose_bf16_products(Bf16Products::Auto, cpu_with(kZen4), false);
  EXPECT_EQ(zen4, (Bf16Choice{Bf16Products::Native, "native: this CPU has bfloat16 dot-product instructions (avx512_bf16)"}));
  EXPECT_EQ(choose_bf16_products(Bf16Products::Auto, cpu_with(kSapphireRapids), false).reason,
            "native: this CPU has bfloat16 dot-product instructions (amx_bf16, avx512_bf16)");
  // A flag's name inside another word, or outside the flags line, is not the flag.
  EXPECT_EQ(choose_bf16_products(Bf16Products::Auto, cpu_with("model name\t: avx512_bf16\nflags\t: avx512_bf16x\n"), false).path,
            Bf16Products::Widened);
}

TEST(Bf16Choice, LibtorchsOwnCapabilityCounts) {
  CpuFacts no_onednn = cpu_with(kZen4);
  no_onednn.onednn = false;
  EXPECT_EQ(choose_bf16_products(Bf16Products::Auto, no_onednn, false).path, Bf16Products::Widened);
  const Bf16Choice capped = choose_bf16_products(Bf16Products::Auto, cpu_with(kZen4, "AVX2"), false);
  EXPECT_EQ(capped.path, Bf16Products::Widened);
  EXPECT_NE(capped.reason.find("ONEDNN_MAX_CPU_ISA = AVX2"), std::string::npos) << capped.reason;
  for (const char* cap : {"AVX512_CORE_BF16", "avx512_core_amx", "AVX10_1_512", "ALL", "DEFAULT"})
    EXPECT_EQ(choose_bf16_products(Bf16Products::Auto, cpu_with(kZen4, cap), false).path, Bf16Products::Native) << cap;
  for (const char* cap : {"AVX512_CORE", "AVX512_CORE_VNNI", "AVX2_VNNI_2", "SSE41"})
    EXPECT_EQ(choose_bf16_products(Bf16Products::Auto, cpu_with(kZen4, cap), false).path, Bf16Products::Widened) << cap;
}

TEST(Bf16Choice, AForcedPathIsKeptOrRefusedWithTheReason) {
  EXPECT_EQ(choose_bf16_products(Bf16Products::Widened, cpu_with(kZen4), false).path, Bf16Products::Widened);
  EXPECT_EQ(choose_bf16_products(Bf16Products::Native, cpu_with(kZen4), false).path, Bf16Products::Native);
  try {
    choose_bf16_products(Bf16Products::Native, cpu_with(kZen2), false);
    FAIL() << "native on a CPU without bfloat16 instructions must be refused";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.bf16_products = \"native\", but this CPU has no bfloat16 dot-product"), std::string::npos)
        << what;
    EXPECT_NE(what.find("hint: leave model.bf16_products at \"auto\""), std::string::npos) << what;
  }
  EXPECT_EQ(choose_bf16_products(Bf16Products::Auto, cpu_with(kZen2), true).path, Bf16Products::Native);
  EXPECT_THROW(choose_bf16_products(Bf16Products::Widened, cpu_with(kZen2), true), InputError);
}

TEST(Bf16Products, OnlyBfloat16CpuOperandsWiden) {
  EXPECT_TRUE(widens(Bf16Products::Widened, at::zeros({1}, at::kBFloat16)));
  EXPECT_FALSE(widens(Bf16Products::Native, at::zeros({1}, at::kBFloat16)));
  EXPECT_FALSE(widens(Bf16Products::Auto, at::zeros({1}, at::kBFloat16)));
  EXPECT_FALSE(widens(Bf16Products::Widened, at::zeros({1}, at::kFloat)));
  EXPECT_FALSE(widens(Bf16Products::Widened, at::zeros({1}, at::kDouble)));
}

at::Tensor bf16_randn(std::vector<int64_t> shape) { return at::randn(shape, at::kDouble).to(at::kBFloat16); }

// The largest elementwise error of `got` against the exact `want`, over the products' scale
// (|a| |b|): one rounding of the result moves an element by at most u of it; float32 sums add
// some k x 2^-24.
double scaled_error(const at::Tensor& got, const at::Tensor& want, const at::Tensor& scale) {
  return ((got.to(at::kDouble) - want).abs() / scale.clamp_min(1e-30)).max().item<double>();
}

// Shapes that cross the row blocks (1024 rows at k = 4096) with b widened whole, the column
// blocks (b over 4 Mi elements: 1024 columns at k = 4096), a one-block product, and a 3-d operand
// whose rows are its first two dimensions.
TEST(Bf16Products, WidenedProductsRoundOnceAcrossBlocks) {
  at::manual_seed(1);
  for (const auto& [m, k, n] : {std::tuple{1100, 4096, 64}, std::tuple{64, 4096, 1100}, std::tuple{5, 7, 3}}) {
    SCOPED_TRACE(::testing::Message() << m << " x " << k << " x " << n);
    const at::Tensor a = bf16_randn({m, k}), b = bf16_randn({k, n}), bias = bf16_randn({n});
    const at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
    const at::Tensor scale = at::mm(ad.abs(), bd.abs());
    const at::Tensor got = matmul(a, b, Bf16Products::Widened);
    EXPECT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_LE(scaled_error(got, at::mm(ad, bd), scale), kUnitRoundoff + 1e-5);
    const at::Tensor lin = linear(a, b.t(), bias, Bf16Products::Widened);  // the bias inside the one rounding
    EXPECT_LE(scaled_error(lin, at::addmm(bias.to(at::kDouble), ad, bd), scale + bias.to(at::kDouble).abs()),
              kUnitRoundoff + 1e-5);
    const at::Tensor wide = product_wide(a, b, Bf16Products::Widened);  // not rounded at all
    EXPECT_EQ(wide.scalar_type(), at::kFloat);
    EXPECT_LE(scaled_error(wide, at::mm(ad, bd), scale), 1e-5);
    const at::Tensor three = matmul(a.view({1, m, k}), b, Bf16Products::Widened);
    EXPECT_TRUE(at::equal(three.view({m, n}), got));
  }
}

// A weight gradient's product, summed over blocks of the contraction (1024 at 4096 rows).
TEST(Bf16Products, WidenedGradientsAddUnroundedAcrossBlocks) {
  at::manual_seed(2);
  const at::Tensor a = bf16_randn({4096, 1100}), b = bf16_randn({1100, 8});
  const at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  at::Tensor acc = at::ones({4096, 8}, at::kFloat);
  add_product(acc, a, b, Bf16Products::Widened, 0.5);
  EXPECT_LE(scaled_error(acc, at::mm(ad, bd).mul_(0.5).add_(1.0), at::mm(ad.abs(), bd.abs())), 1e-5);
  at::Tensor narrow = at::zeros({4096, 8}, at::kBFloat16);  // an accumulator of the operands' type: one rounding
  add_product(narrow, a, b, Bf16Products::Widened);
  EXPECT_LE(scaled_error(narrow, at::mm(ad, bd), at::mm(ad.abs(), bd.abs())), kUnitRoundoff + 1e-5);
}

// The paths differ exactly where they say: (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 needs 15 bits. Native
// rounds the product to bfloat16 before adding it to the float32 gradient; widened adds it whole.
TEST(Bf16Products, TheWidenedPathReallyMultipliesInFloat32) {
  const at::Tensor a = at::full({1, 1}, 1.0 + 1.0 / 128, at::kBFloat16);
  at::Tensor native = at::zeros({1, 1}, at::kFloat), widened = at::zeros({1, 1}, at::kFloat);
  add_product(native, a, a, Bf16Products::Native);
  add_product(widened, a, a, Bf16Products::Widened);
  EXPECT_EQ(native.item<float>(), 1.015625f);
  EXPECT_EQ(widened.item<float>(), 1.01568603515625f);
  EXPECT_EQ(product_wide(a, a, Bf16Products::Widened).item<float>(), 1.01568603515625f);
  EXPECT_EQ(product_wide(a, a, Bf16Products::Native).item<float>(), 1.015625f);
}

// Attention on the widened path: either kernel in float32 on the widened operands, its output and
// gradients rounded once to bfloat16, its log-sum-exp float32; close to the float64 attention.
TEST(Bf16Products, WidenedAttentionRoundsOnlyItsResults) {
  at::manual_seed(3);
  const at::Tensor q = bf16_randn({2, 2, 40, 8}), k = bf16_randn({2, 2, 40, 8}), v = bf16_randn({2, 2, 40, 8});
  const at::Tensor dout = bf16_randn({2, 2, 40, 8});
  const AttentionKernel exact{.kind = AttnKernel::Tiled, .tile = 16};
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const AttentionForward want = attention_forward(exact, d(q), d(k), d(v));
  const AttentionGrads want_g = attention_backward(exact, d(dout), d(q), d(k), d(v), want.out, want.lse);
  for (AttnKernel kind : {AttnKernel::Fused, AttnKernel::Tiled}) {
    SCOPED_TRACE(name_of(kind));
    const AttentionKernel kernel{.kind = kind, .tile = 16, .products = Bf16Products::Widened};
    const AttentionForward f = attention_forward(kernel, q, k, v);
    EXPECT_EQ(f.out.scalar_type(), at::kBFloat16);
    EXPECT_EQ(f.lse.scalar_type(), at::kFloat);
    const double out_scale = want.out.abs().max().item<double>();
    EXPECT_LE((d(f.out) - want.out).abs().max().item<double>(), kUnitRoundoff * out_scale);
    EXPECT_LE((d(f.lse) - want.lse).abs().max().item<double>(), 1e-5 * want.lse.abs().max().item<double>());
    const AttentionGrads g = attention_backward(kernel, dout, q, k, v, f.out, f.lse);
    for (const auto& [got, ref] : {std::pair{g.dq, want_g.dq}, {g.dk, want_g.dk}, {g.dv, want_g.dv}}) {
      EXPECT_EQ(got.scalar_type(), at::kBFloat16);
      // dout and out are bfloat16 (two roundings feed D = dout . out), and the result is rounded once.
      EXPECT_LE((d(got) - ref).abs().max().item<double>(), 4 * kUnitRoundoff * ref.abs().max().item<double>());
    }
    const AttentionForward partial = attention_forward(kernel, q, k, v, 0, AttentionOut::Wide);  // the ring's
    EXPECT_EQ(partial.out.scalar_type(), at::kFloat);
  }
}

// Over blocks of (batch x head) rows (21 rows of 1024 x 64 at a time here, so 24 rows are two
// blocks): the same bits as the float32 kernel on the whole widened operands, rounded once.
TEST(Bf16Products, WidenedAttentionBlocksChangeNoBit) {
  at::manual_seed(4);
  const at::Tensor q = bf16_randn({2, 12, 1024, 64}), k = bf16_randn({2, 12, 1024, 64}), v = bf16_randn({2, 12, 1024, 64});
  const at::Tensor dout = bf16_randn({2, 12, 1024, 64});
  const auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
  for (AttnKernel kind : {AttnKernel::Fused, AttnKernel::Tiled}) {
    SCOPED_TRACE(name_of(kind));
    const AttentionKernel whole{.kind = kind, .tile = 128}, blocked{.kind = kind, .tile = 128, .products = Bf16Products::Widened};
    const AttentionForward want = attention_forward(whole, f32(q), f32(k), f32(v));
    const AttentionForward got = attention_forward(blocked, q, k, v);
    EXPECT_TRUE(at::equal(got.out, want.out.to(at::kBFloat16)));
    EXPECT_TRUE(at::equal(got.lse, want.lse));
    const AttentionGrads want_g = attention_backward(whole, f32(dout), f32(q), f32(k), f32(v), f32(got.out), got.lse);
    const AttentionGrads got_g = attention_backward(blocked, dout, q, k, v, got.out, got.lse);
    EXPECT_TRUE(at::equal(got_g.dq, want_g.dq.to(at::kBFloat16)));
    EXPECT_TRUE(at::equal(got_g.dk, want_g.dk.to(at::kBFloat16)));
    EXPECT_TRUE(at::equal(got_g.dv, want_g.dv.to(at::kBFloat16)));
  }
}

}  // namespace
}  // namespace loom::nn
