#include "loom/generate/decoder.h"

#include <algorithm>
#include <memory>

#include <chrono>
#include <limits>

#include "loom/core/error.h"

namespace loom::generate {

std::string first_undecodable(const models::Model& model) {
  for (const auto& layer : model.chain)
    if (dynamic_cast<nn::Decodable*>(layer.get()) == nullptr) return layer->name();
  return "";
}

Decoder::Decoder(models::Model& model, int64_t context) : context_(context) {
  for (const auto& layer : model.chain) {
    auto* decodable = dynamic_cast<nn::Decodable*>(layer.get());
    LOOM_CHECK(decodable != nullptr, "[decode] layer {} cannot decode", layer->name());
    layers_.push_back(decodable);
    caches_.emplace_back(context);
  }
}

at::Tensor Decoder::feed(const at::Tensor& ids) {
  LOOM_CHECK(ids.dim() == 2 && position_ + ids.size(1) <= context_,
             "[decode] {} more tokens after {} pass the context of {}", ids.size(-1), position_, context_);
  at::Tensor x = ids;
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->decode(x, position_, caches_[i]);
  position_ += ids.size(1);
  return x;
}

void check_prompt(int64_t prompt_tokens) {
  LOOM_CHECK_INPUT(prompt_tokens > 0, "--prompt is empty: generation continues a text of at least one token");
}

namespace {

using Clock = std::chrono::steady_clock;

at::Tensor row(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::TensorOptions().dtype(at::kLong)).view({1, -1});
}

// The logits of the last token fed, [vocab], with the ids past `id_limit` never to be chosen.
at::Tensor last_logits(const at::Tensor& logits, int64_t id_limit) {
  at::Tensor last = logits[0][-1];
  if (id_limit > 0 && id_limit < last.size(0)) {
    last = last.clone();
    last.narrow(0, id_limit, last.size(0) - id_limit).fill_(-std::numeric_limits<double>::infinity());
  }
  return last;
}

}  // namespace

// NOTE [Sliding window]: a model knows `context` positions. A prompt longer than that is read from
// its last `context` tokens, and once the sequence fills the context each further token is chosen
// from a fresh pass over the sequence's last `context` tokens (the window slides one token at a
// time, so every token sees as much text as the model can take). The cache cannot slide with the
// window: positions are absolute (a GPT's position table) or rotated into the cached keys (rotary),
// so a token past the context costs one pass over the window instead of one over the new token.
GenerateResult generate(models::Model& model, int64_t context, const std::vector<int64_t>& prompt,
                        const GenerateOptions& options, const std::function<void(int64_t)>& on_token) {
  check_prompt(static_cast<int64_t>(prompt.size()));
  LOOM_CHECK_INPUT(options.max_tokens >= 1, "--max-tokens {} must be >= 1", options.max_tokens);
  Sampler sampler(options.sampling);
  GenerateResult result;
  result.prompt_dropped = std::max<int64_t>(0, static_cast<int64_t>(prompt.size()) - context);
  std::vector<int64_t> sequence(prompt.begin() + result.prompt_dropped, prompt.end());
  const auto window = [&] {
    const auto n = static_cast<int64_t>(sequence.size());
    return row(std::vector<int64_t>(sequence.begin() + std::max<int64_t>(0, n - context), sequence.end()));
  };
  auto decoder = std::make_unique<Decoder>(model, context);
  const auto start = Clock::now();
  at::Tensor logits = decoder->feed(row(sequence));
  for (int64_t n = 0;; ++n) {
    const int64_t token = sampler.next(last_logits(logits, options.id_limit));
    result.tokens.push_back(token);
    sequence.push_back(token);
    if (n == 0) result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    on_token(token);
    if (n + 1 == options.max_tokens) break;
    if (options.recompute || static_cast<int64_t>(sequence.size()) > context) {  // a fresh pass over the window
      if (static_cast<int64_t>(sequence.size()) > context && result.first_slid < 0) result.first_slid = n + 1;
      decoder = std::make_unique<Decoder>(model, context);
      logits = decoder->feed(window());
    } else {
      logits = decoder->feed(row({token}));
    }
  }
  result.decode_seconds =
      std::chrono::duration<double>(Clock::now() - start).count() - result.prefill_seconds;
  return result;
}

}  // namespace loom::generate
