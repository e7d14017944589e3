#include "loom/trace/metrics_writer.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace loom::trace {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (!path.empty()) out_ = OutputFile(path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled()) return;
  out_.write(record.dump() + '\n');
  out_.flush();
}

void MetricsWriter::carry(const std::string& path, int64_t last_step) {
  if (!enabled()) return;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) continue;
    if (record["step"].get<int64_t>() <= last_step) out_.write(line + '\n');
  }
  out_.flush();
}

void MetricsWriter::close() {
  if (enabled()) out_.commit();
}

}  // namespace loom::trace
