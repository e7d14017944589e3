#pragma once
// The tests' small models, one builder per model kind, shared by the unit and the multi-rank
// suites: a suite starts from these and sets only what it is about, so what "a small model"
// means is written once.
#include <cstdint>

#include "loom/core/config.h"

namespace loom::test {

// A GPT small enough to train under many layouts in a test, in float64: d_model 32, 4 heads,
// attention tiles of 8, 3 steps at lr 1e-2 with one warmup step, one thread, small gradient
// buckets (several per step, so overlap and ordering are exercised).
inline Config small_gpt(int64_t vocab, int64_t n_layers, int64_t seq_len, int64_t global_batch, int64_t micro_batch) {
  Config c;
  c.model.vocab = vocab;
  c.model.d_model = 32;
  c.model.n_layers = n_layers;
  c.model.n_heads = 4;
  c.model.seq_len = seq_len;
  c.model.attn_tile = 8;
  c.model.dtype = "float64";
  c.train.steps = 3;
  c.train.global_batch = global_batch;
  c.train.micro_batch = micro_batch;
  c.train.warmup = 1;
  c.train.lr = 1e-2;
  c.train.threads = 1;
  c.parallel.bucket_mb = 0.02;
  c.parallel.sparse = SparseMode::Off;  // pinned: see train_run
  return c;
}

// The Llama of the same size: 8 query heads of 4 dims sharing `kv_heads` key/value heads (4:
// grouped, and tp or tp x sp up to 4 still holds whole kv heads), rotary positions, no biases,
// and a SwiGLU MLP of hidden 96 (2/3 x 4 x 32 = 85, rounded up to ffn_multiple_of 16).
inline Config small_llama(int64_t vocab, int64_t n_layers, int64_t seq_len, int64_t global_batch, int64_t micro_batch,
                          int64_t kv_heads = 4, bool tied = false) {
  Config c = small_gpt(vocab, n_layers, seq_len, global_batch, micro_batch);
  c.model.kind = "llama";
  c.model.n_heads = 8;
  c.model.n_kv_heads = kv_heads;
  c.model.ffn_multiple_of = 16;
  c.model.tie_embeddings = tied;
  return c;
}

// A DLRM click model small enough for any layout: 3 tables of 40 rows of 8, bags of 2, 5 dense
// features, one hidden layer of 16 below and above, in float64; 3 steps at lr 3e-2 with one
// warmup step, one thread, tiny gradient buckets (several per step).
inline Config small_dlrm(int64_t global_batch, int64_t micro_batch) {
  Config c;
  c.model.kind = "dlrm";
  c.model.d_model = 8;
  c.model.tables = 3;
  c.model.table_rows = 40;
  c.model.bag_size = 2;
  c.model.dense_features = 5;
  c.model.bottom_mlp = {16};
  c.model.top_mlp = {16};
  c.model.dtype = "float64";
  c.train.steps = 3;
  c.train.global_batch = global_batch;
  c.train.micro_batch = micro_batch;
  c.train.warmup = 1;
  c.train.lr = 3e-2;
  c.train.threads = 1;
  c.parallel.bucket_mb = 0.001;
  c.parallel.sparse = SparseMode::Off;  // pinned: see layout_harness.h, train_run
  return c;
}

}  // namespace loom::test
