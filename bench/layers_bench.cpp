// Micro-benchmarks of the GPT chain's layers at gpt-tiny shapes (one micro-batch of 4 x 256,
// d_model 256, 4 heads, vocab 4096): forward + backward_input + backward_weight per iteration.
// Run: build/bin/loom_bench_layers [--benchmark_filter=...]  (threads: LOOM_BENCH_THREADS, 1)
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "loom/dist/null_communicator.h"
#include "loom/nn/attention.h"
#include "loom/blocks/attention_block.h"
#include "loom/blocks/embedding.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/blocks/mlp_block.h"
#include "loom/optim/adamw.h"

namespace {

constexpr int64_t kBatch = 4, kSeq = 256, kModel = 256, kHeads = 4, kVocab = 4096;

void init(loom::nn::Layer& layer) {
  for (auto* p : layer.params()) loom::nn::initialise(*p, 1, at::kFloat);
}

void run_layer(benchmark::State& state, loom::nn::Layer& layer, const at::Tensor& x, const loom::nn::MicroBatch& mb,
               const at::Tensor& dy) {
  init(layer);
  for (auto _ : state) {
    loom::nn::Saved saved;
    benchmark::DoNotOptimize(layer.forward(x, mb, saved));
    benchmark::DoNotOptimize(layer.backward_input(dy, saved));
    layer.backward_weight(saved);
  }
}

at::Tensor activations() { return at::randn({kBatch, kSeq, kModel}); }

void BM_AttentionBlock(benchmark::State& state) {
  loom::dist::NullCommunicator tp;
  const loom::nn::AttentionKernel tiled{.kind = loom::AttnKernel::Tiled, .tile = state.range(0)};
  loom::blocks::AttentionBlock layer("attn", {.d_model = kModel, .n_heads = kHeads, .kernel = tiled}, tp);
  run_layer(state, layer, activations(), {}, activations());
}
BENCHMARK(BM_AttentionBlock)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_AttentionKernel(benchmark::State& state) {
  const int64_t hd = kModel / kHeads, tile = state.range(0);
  auto q = at::randn({kBatch, kHeads, kSeq, hd}), k = at::randn({kBatch, kHeads, kSeq, hd}),
       v = at::randn({kBatch, kHeads, kSeq, hd});
  for (auto _ : state) {
    auto f = loom::nn::causal_attention_forward(q, k, v, tile);
    benchmark::DoNotOptimize(loom::nn::causal_attention_backward(f.out, q, k, v, f.out, f.lse, tile).dq);
  }
}
BENCHMARK(BM_AttentionKernel)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_MlpBlock(benchmark::State& state) {
  loom::dist::NullCommunicator tp;
  loom::blocks::MlpBlock layer("mlp", {.d_model = kModel, .hidden = 4 * kModel}, tp);
  run_layer(state, layer, activations(), {}, activations());
}
BENCHMARK(BM_MlpBlock)->Unit(benchmark::kMillisecond);

void BM_LmHeadLoss(benchmark::State& state) {
  loom::dist::NullCommunicator tp;
  loom::blocks::LmHeadLoss layer(kModel, kVocab, tp);
  loom::nn::MicroBatch mb;
  mb.targets = at::randint(0, kVocab, {kBatch, kSeq}, at::kLong);
  mb.loss_scale = 1.0 / (kBatch * kSeq);
  run_layer(state, layer, activations(), mb, {});
}
BENCHMARK(BM_LmHeadLoss)->Unit(benchmark::kMillisecond);

void BM_Embedding(benchmark::State& state) {
  loom::dist::NullCommunicator tp;
  loom::blocks::TokenPositionEmbedding layer(kVocab, kSeq, kModel, tp);
  run_layer(state, layer, at::randint(0, kVocab, {kBatch, kSeq}, at::kLong), {}, activations());
}
BENCHMARK(BM_Embedding)->Unit(benchmark::kMillisecond);

void BM_AdamWStep(benchmark::State& state) {
  loom::nn::Param p{.name = "w", .full_shape = {state.range(0)}, .init = loom::nn::Init::Normal, .init_std = 0.02,
                    .weight_decay = true};
  loom::nn::initialise(p, 1, at::kFloat);
  p.grad.normal_();
  loom::optim::AdamW opt({&p}, {});
  for (auto _ : state) opt.step(1e-3);
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4 * 4);
}
BENCHMARK(BM_AdamWStep)->Arg(5322240)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  const char* threads = std::getenv("LOOM_BENCH_THREADS");
  at::set_num_threads(threads != nullptr ? std::atoi(threads) : 1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
