#include "loom/data/batches.h"

#include "loom/data/clicks.h"
#include "loom/data/sampler.h"
#include "loom/data/token_source.h"

namespace loom::data {
namespace {

class TokenBatches final : public Batches {
 public:
  explicit TokenBatches(const Config& config)
      : source_(open_source(config)),
        shape_{config.train.global_batch, config.train.micro_batch, config.model.seq_len} {}
  nn::MicroBatch microbatch(int64_t step, int64_t index) const override {
    return make_microbatch(*source_, shape_, step, index);
  }
  std::string describe() const override { return source_->describe(); }

 private:
  std::unique_ptr<TokenSource> source_;
  BatchShape shape_;
};

class ClickBatches final : public Batches {
 public:
  explicit ClickBatches(const Config& config)
      : clicks_(open_clicks(config)), global_batch_(config.train.global_batch), micro_batch_(config.train.micro_batch) {}
  nn::MicroBatch microbatch(int64_t step, int64_t index) const override {
    return clicks_->microbatch(global_batch_, micro_batch_, step, index);
  }
  std::string describe() const override { return clicks_->describe(); }

 private:
  std::unique_ptr<ClickData> clicks_;
  int64_t global_batch_, micro_batch_;
};

}  // namespace

std::unique_ptr<Batches> token_batches(const Config& config) { return std::make_unique<TokenBatches>(config); }
std::unique_ptr<Batches> click_batches(const Config& config) { return std::make_unique<ClickBatches>(config); }

}  // namespace loom::data
