#pragma once
// Writes one JSON object per line (JSON Lines), flushed per record, so a run that stops early
// leaves every finished step readable.
#include <fstream>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace loom::trace {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // "" = disabled
  void write(const nlohmann::json& record);
  bool enabled() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

}  // namespace loom::trace
