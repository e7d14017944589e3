#include "loom/generate/decoder.h"

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

void check_prompt(int64_t prompt_tokens, int64_t context) {
  LOOM_CHECK_INPUT(prompt_tokens > 0, "--prompt is empty: generation continues a text of at least one token");
  LOOM_CHECK_INPUT(prompt_tokens <= context,
                   "the prompt is {} tokens, longer than the model's context of {} (model.max_positions, else "
                   "model.seq_len); hint: shorten --prompt",
                   prompt_tokens, context);
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

GenerateResult generate(models::Model& model, int64_t context, const std::vector<int64_t>& prompt,
                        const GenerateOptions& options, const std::function<void(int64_t)>& on_token) {
  check_prompt(static_cast<int64_t>(prompt.size()), context);
  LOOM_CHECK_INPUT(options.max_tokens >= 1, "--max-tokens {} must be >= 1", options.max_tokens);
  Sampler sampler(options.sampling);
  GenerateResult result;
  std::vector<int64_t> sequence = prompt;
  Decoder decoder(model, context);
  const auto start = Clock::now();
  at::Tensor logits = decoder.feed(row(prompt));
  for (int64_t n = 0;; ++n) {
    const int64_t token = sampler.next(last_logits(logits, options.id_limit));
    result.tokens.push_back(token);
    sequence.push_back(token);
    if (n == 0) result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    on_token(token);
    if (n + 1 == options.max_tokens) break;
    if (static_cast<int64_t>(sequence.size()) > context) {  // the new token has no position left
      result.stopped_at_context = true;
      break;
    }
    if (options.recompute) {
      Decoder fresh(model, context);
      logits = fresh.feed(row(sequence));
    } else {
      logits = decoder.feed(row({token}));
    }
  }
  result.decode_seconds =
      std::chrono::duration<double>(Clock::now() - start).count() - result.prefill_seconds;
  return result;
}

}  // namespace loom::generate
