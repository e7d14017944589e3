#pragma once
// Decoding a serial model's chain with a key/value cache (NOTE [Decoding]), and the generation
// loop on top of it: prefill the prompt in one pass, then one token at a time, each step's
// attention one pass over the cached keys and values, so a new token costs time linear in the
// length, not quadratic.
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "loom/generate/sampling.h"
#include "loom/models/model.h"
#include "loom/nn/decode.h"

namespace loom::generate {

// The name of the first layer of `model` that cannot decode; empty when every layer can.
std::string first_undecodable(const models::Model& model);

class Decoder {
 public:
  // `model`: a serial model whose every layer decodes; `context`: the most positions a sequence
  // may reach (the position table's size, or seq_len).
  Decoder(models::Model& model, int64_t context);
  // Feeds the next tokens of each sequence, ids [B, T] (int64, the same B every call), and
  // returns their logits [B, T, vocab]. Error when the sequence would pass the context.
  at::Tensor feed(const at::Tensor& ids);
  int64_t position() const { return position_; }  // tokens fed so far
  int64_t context() const { return context_; }

 private:
  std::vector<nn::Decodable*> layers_;
  std::vector<nn::DecodeCache> caches_;
  int64_t context_, position_ = 0;
};

struct GenerateOptions {
  int64_t max_tokens = 64;
  SamplingOptions sampling;
  // Ids at or above this are never chosen (a tokenizer smaller than the model's vocabulary);
  // 0 = every id of the model.
  int64_t id_limit = 0;
  // Recompute the whole sequence for every token instead of caching: the reference the cache is
  // measured against (bench/generate.sh).
  bool recompute = false;
};

struct GenerateResult {
  std::vector<int64_t> tokens;  // generated, after the prompt
  int64_t prompt_dropped = 0;   // the prompt's first tokens, beyond the context, that were not read
  int64_t first_slid = -1;      // the first of `tokens` chosen from a sliding window (-1: none)
  double prefill_seconds = 0;   // the prompt's pass and the first token
  double decode_seconds = 0;    // every later token
};

// InputError when the prompt is empty.
void check_prompt(int64_t prompt_tokens);

// Generates options.max_tokens tokens after `prompt` (one sequence) with `model`, calling
// on_token with each as soon as it is chosen. A token is chosen from the logits of the last
// token fed; past `context` positions the window slides (NOTE [Sliding window]).
GenerateResult generate(models::Model& model, int64_t context, const std::vector<int64_t>& prompt,
                        const GenerateOptions& options, const std::function<void(int64_t)>& on_token);

}  // namespace loom::generate
