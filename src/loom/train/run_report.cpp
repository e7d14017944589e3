#include "loom/train/run_report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <utility>

#include "loom/plan/mfu.h"

namespace loom::train {

RunReport::RunReport(const ReportOptions& options, bool rank0, int world_size)
    : options_(options),
      progress_(rank0 ? options.console : nullptr, options.resumed_step, options.last_step, options.steps,
                options.unit.rate.data()) {
  if (!rank0) {
    options_.console = nullptr;
    return;
  }
  // Both files opened before either changes: one that cannot be opened leaves the other as it was.
  const auto open = [](const std::string& path) { return path.empty() ? LiveFile() : LiveFile::open(path); };
  LiveFile metrics = open(options.metrics_path), trace = open(options.trace_path);
  metrics_ = trace::MetricsWriter(std::move(metrics), options.resumed_step);
  if (trace.is_open()) trace_ = std::make_unique<trace::TraceFile>(std::move(trace), world_size);
}

RunReport::~RunReport() {
  try {
    close();
  } catch (...) {  // already failing: the first error is the one to report
  }
}

void RunReport::header(const std::string& lines) {
  if (options_.console != nullptr) *options_.console << lines << std::flush;  // a pipe sees it before step 1
}

namespace {

// Each table's path, the reason and auto's measured times (NOTE [Table paths]).
nlohmann::json tables_json(const std::vector<replicas::TableChoice>& choices) {
  nlohmann::json out = nlohmann::json::array();
  for (const replicas::TableChoice& c : choices)
    out.push_back({{"table", c.table}, {"path", c.sparse ? "sparse" : "dense"}, {"reason", c.reason},
                   {"sparse_ms", c.sparse_ms}, {"dense_ms", c.dense_ms}});
  return out;
}

nlohmann::json experts_json(const std::vector<ExpertLoad>& loads) {
  nlohmann::json out = nlohmann::json::array();
  for (const ExpertLoad& l : loads)
    out.push_back({{"block", l.block}, {"tokens", l.tokens}, {"imbalance", l.imbalance()}, {"dropped", l.dropped},
                   {"aux_loss", l.aux_loss}});
  return out;
}

}  // namespace

double ExpertLoad::imbalance() const {
  int64_t total = 0, most = 0;
  for (int64_t t : tokens) total += t, most = std::max(most, t);
  return total == 0 ? 0.0 : static_cast<double>(most) * static_cast<double>(tokens.size()) / static_cast<double>(total);
}

void RunReport::step(StepRecord& r, double flops_per_step, double peak_flops) {
  const double seconds = r.step_ms / 1e3;
  r.tokens_per_s = static_cast<double>(options_.samples_per_step * options_.unit.per_sample) / seconds;
  r.mfu = plan::model_flops_utilisation(flops_per_step, seconds, peak_flops, options_.ranks);
  nlohmann::json line = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                  {fmt::format("{}_per_s", options_.unit.items), r.tokens_per_s}, {"step_ms", r.step_ms},
                  {"mfu", r.mfu}, {"sparse_partitions", r.sparse_partitions},
                  {"sparse_tables", tables_json(r.tables)}, {"peak_bytes", r.peak_bytes},
                  {"host_peak_bytes", r.host_peak_bytes}, {"state_bytes", r.state_bytes},
                  {"model_state_bytes", r.model_state_bytes},
                  {"working_bytes", r.working_bytes},
                  {"comm_bytes_per_step", r.comm_bytes}, {"bubble_fraction", r.bubble_fraction},
                  {"predicted_bubble_fraction", r.predicted_bubble_fraction},
                  {"peak_bytes_by_stage", r.peak_bytes_by_stage}, {"checkpoint_s", r.checkpoint_s}};
  if (!r.experts.empty()) line["experts"] = experts_json(r.experts);
  if (r.val_loss) {  // NOTE [Validation]; perplexity only where the loss is per token
    line["val_loss"] = *r.val_loss;
    if (options_.unit.items == "tokens") line["val_ppl"] = std::exp(*r.val_loss);
    line["eval_s"] = r.eval_s;
  }
  metrics_.write(line);
  if ((r.step - 1) % options_.log_every == 0 || r.step == options_.last_step || r.val_loss) progress_.print(r);
}

void RunReport::close() {
  if (std::exchange(closed_, true)) return;
  metrics_.close();
  if (trace_) trace_->close();
}

void RunReport::finalise_now() {
  metrics_.close();
  if (trace_) trace_->close();
}

// One line at the end: what was trained, how fast, the final loss, where the outputs went.
void RunReport::summary(const std::vector<StepRecord>& records, double seconds, const std::string& checkpoint) {
  if (options_.console == nullptr) return;
  const models::Throughput& unit = options_.unit;
  const auto done = static_cast<double>(static_cast<int64_t>(records.size()) * options_.samples_per_step *
                                        unit.per_sample);
  std::string where;
  if (!options_.metrics_path.empty()) where += fmt::format("; metrics: {}", options_.metrics_path);
  if (!options_.trace_path.empty()) where += fmt::format("; trace: {}", options_.trace_path);
  if (!checkpoint.empty()) where += fmt::format("; checkpoint: {}", checkpoint);
  std::string val;
  for (const StepRecord& r : records)
    if (r.val_loss) val = fmt::format(", val_loss {:.4f} (step {})", *r.val_loss, r.step);
  *options_.console << fmt::format("loom: done: {} steps, {:.0f} {} in {:.2f} s ({:.0f} {}/s), final loss {:.4f}{}{}\n",
                                   records.size(), done, unit.items, seconds, done / seconds, unit.rate,
                                   records.empty() ? 0.0 : records.back().loss, val, where)
                    << std::flush;
}

}  // namespace loom::train
