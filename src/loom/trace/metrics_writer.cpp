#include "loom/trace/metrics_writer.h"

#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::trace {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::trunc);
  LOOM_CHECK_INPUT(out_.good(), "cannot write metrics file '{}'", path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace loom::trace
