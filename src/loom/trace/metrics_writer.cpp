#include "loom/trace/metrics_writer.h"

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

void MetricsWriter::close() {
  if (enabled()) out_.commit();
}

}  // namespace loom::trace
