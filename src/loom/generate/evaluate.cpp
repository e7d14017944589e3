#include "loom/generate/evaluate.h"

#include "loom/core/error.h"
#include "loom/data/token_file.h"
#include "loom/data/token_source.h"
#include "loom/generate/decoder.h"

namespace loom::generate {

// NOTE [Evaluation]: each batch of windows is one prefill of a fresh Decoder (the same forward as
// generation's, causal, from position 0), and the loss is summed in float64 from the logits'
// log-softmax, so the figure does not depend on the batch size beyond float32's rounding.
EvalResult evaluate(LoadedModel& m, const EvalOptions& o) {
  const int64_t seq = o.seq > 0 ? o.seq : m.config.model.seq_len;
  LOOM_CHECK_INPUT(seq <= m.context(), "--seq {} is longer than the model's context ({} positions)", seq, m.context());
  LOOM_CHECK_INPUT(o.batch > 0, "--batch {} must be at least 1", o.batch);
  Config config = m.config;
  config.data.source = o.data.starts_with("text:") ? o.data : "tokens:" + o.data;
  config.model.seq_len = seq;
  const std::unique_ptr<data::TokenSource> source = data::open_source(config);
  const auto* file = dynamic_cast<const data::TokenFile*>(source.get());
  LOOM_CHECK(file, "evaluate: a token file");
  int64_t windows = (file->size() - 1) / seq;
  if (o.windows > 0) windows = std::min(windows, o.windows);
  EvalResult r{.windows = windows, .tokens = windows * seq};
  double nll = 0;
  for (int64_t first = 0; first < windows; first += o.batch) {
    const int64_t rows = std::min(o.batch, windows - first);
    at::Tensor ids = at::empty({rows, seq + 1}, at::kLong);
    for (int64_t i = 0; i < rows; ++i) file->read_tokens((first + i) * seq, seq + 1, ids[i].data_ptr<int64_t>());
    Decoder decoder(m.model, m.context());
    const at::Tensor logits = decoder.feed(ids.narrow(1, 0, seq));
    const at::Tensor logp = logits.to(at::kDouble).log_softmax(-1);
    nll -= logp.gather(-1, ids.narrow(1, 1, seq).unsqueeze(-1)).sum().item<double>();
    if (first == 0 && o.keep_logits) r.ids = ids.narrow(1, 0, seq).contiguous(), r.logits = logits.to(at::kFloat);
  }
  r.loss = nll / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace loom::generate
