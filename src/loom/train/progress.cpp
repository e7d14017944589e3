#include "loom/train/progress.h"

#include <fmt/format.h>

#include <cmath>
#include <ostream>
#include <string>
#include <string_view>

#include "loom/core/units.h"
#include "loom/train/trainer.h"

namespace loom::train {

ProgressPrinter::ProgressPrinter(std::ostream* out, int64_t total_steps, const char* unit)
    : out_(out), total_steps_(total_steps), unit_(unit), start_(std::chrono::steady_clock::now()) {}

void ProgressPrinter::print(const StepRecord& r) {
  if (out_ == nullptr) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const auto eta = static_cast<int64_t>(elapsed / static_cast<double>(r.step) *
                                        static_cast<double>(total_steps_ - r.step));
  const int width = static_cast<int>(fmt::format("{}", total_steps_).size());
  // A validation pass's loss, and its perplexity where the loss is per token.
  const std::string val = !r.val_loss ? std::string()
                          : std::string_view(unit_) == "tok"
                              ? fmt::format(" | val {:.4f} (ppl {:.2f})", *r.val_loss, std::exp(*r.val_loss))
                              : fmt::format(" | val {:.4f}", *r.val_loss);
  *out_ << fmt::format("step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | gnorm {:.3f} | {:.0f} {}/s | mfu {:.1f}% | "
                       "peak {} | eta {}:{:02d}\n",
                       r.step, width, total_steps_, r.loss, val, r.lr, r.grad_norm, r.tokens_per_s, unit_, 100 * r.mfu,
                       format_bytes(static_cast<double>(r.peak_bytes)), eta / 60, eta % 60)
        << std::flush;
}

}  // namespace loom::train
