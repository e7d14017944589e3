#pragma once
// `loom eval` (NOTE [Evaluation]): a checkpoint's loss and perplexity on a token file, in one
// process, and the logits of its first batch for other tools to compare against.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "loom/generate/load_model.h"

namespace loom::generate {

struct EvalOptions {
  std::string data;     // a token file (`loom data prepare`'s, with its sidecar) or "text:PATH" (bytes)
  int64_t seq = 0;      // window length; 0: the model's seq_len
  int64_t batch = 8;    // windows per forward pass
  int64_t windows = 0;  // the most windows read; 0: every whole one in the file
  bool keep_logits = false;  // keep the first batch's ids and logits in the result
};

struct EvalResult {
  int64_t windows = 0, tokens = 0;  // tokens predicted (windows x seq)
  double loss = 0;                  // mean negative log-likelihood, nats per token
  double perplexity = 0;            // exp(loss)
  at::Tensor ids, logits;           // keep_logits: the first batch's [B, seq] and [B, seq, vocab]
};

// The windows are the file's consecutive, non-overlapping runs of seq + 1 tokens (each predicts
// its last seq from the ones before). InputError for a file shorter than one window, a window
// longer than the model's context and ids beyond the vocabulary. Writes nothing.
EvalResult evaluate(LoadedModel& model, const EvalOptions& options);

}  // namespace loom::generate
