#include "loom/trace/metrics_writer.h"

#include <nlohmann/json.hpp>

namespace loom::trace {
namespace {

// A record the resumed run keeps: a step it does not train again.
bool before_resume(std::string_view line, int64_t resumed_step) {
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
  return record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
         record["step"].get<int64_t>() <= resumed_step;
}

}  // namespace

MetricsWriter::MetricsWriter(LiveFile file, int64_t resumed_step) : out_(std::move(file)) {
  if (!out_.is_open()) return;
  if (resumed_step > 0)
    out_.resume([&](std::string_view line) { return before_resume(line, resumed_step); });
  else
    out_.start();
}

void MetricsWriter::write(const nlohmann::json& record) { out_.append(record.dump() + '\n'); }

void MetricsWriter::close() { out_.close(); }

}  // namespace loom::trace
