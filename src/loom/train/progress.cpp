#include "loom/train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "loom/core/units.h"
#include "loom/train/trainer.h"

namespace loom::train {

std::string eta_text(double elapsed_s, int64_t done, int64_t left) {
  if (done <= 0) return "?";
  const auto eta = static_cast<int64_t>(std::llround(elapsed_s / static_cast<double>(done) * static_cast<double>(left)));
  if (eta < 3600) return fmt::format("{}:{:02d}", eta / 60, eta % 60);
  return fmt::format("{}:{:02d}:{:02d}", eta / 3600, eta / 60 % 60, eta % 60);
}

ProgressPrinter::ProgressPrinter(std::ostream* out, int64_t first_step, int64_t last_step, int64_t total_steps,
                                 const char* unit, Now now)
    : out_(out), first_step_(first_step), last_step_(last_step), total_steps_(total_steps), unit_(unit),
      now_(std::move(now)), start_(now_()) {}

namespace {

// NOTE [Expert measures]: the most uneven block's load (busiest expert over the mean) and the
// assignments dropped in all blocks; nothing without experts.
std::string experts_text(const std::vector<ExpertLoad>& loads) {
  if (loads.empty()) return {};
  double worst = 0;
  int64_t dropped = 0;
  for (const ExpertLoad& l : loads) worst = std::max(worst, l.imbalance()), dropped += l.dropped;
  return fmt::format(" | experts max/mean {:.2f}{}", worst, dropped > 0 ? fmt::format(" dropped {}", dropped) : "");
}

}  // namespace

// The ETA is this process's pace over the steps it ran, times the steps it has left to run.
void ProgressPrinter::print(const StepRecord& r) {
  if (out_ == nullptr) return;
  const double elapsed = std::chrono::duration<double>(now_() - start_).count();
  const std::string eta = eta_text(elapsed, r.step - first_step_, last_step_ - r.step);
  const int width = static_cast<int>(fmt::format("{}", total_steps_).size());
  // A validation pass's loss, and its perplexity where the loss is per token.
  const std::string val = !r.val_loss ? std::string()
                          : std::string_view(unit_) == "tok"
                              ? fmt::format(" | val {:.4f} (ppl {:.2f})", *r.val_loss, std::exp(*r.val_loss))
                              : fmt::format(" | val {:.4f}", *r.val_loss);
  *out_ << fmt::format("step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | gnorm {:.3f}{} | {:.0f} {}/s | mfu {:.1f}% | "
                       "peak {} | eta {}\n",
                       r.step, width, total_steps_, r.loss, val, r.lr, r.grad_norm, experts_text(r.experts),
                       r.tokens_per_s, unit_, 100 * r.mfu, format_bytes(static_cast<double>(r.peak_bytes)), eta)
        << std::flush;
}

}  // namespace loom::train
