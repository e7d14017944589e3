#pragma once
// Writes one JSON object per line (JSON Lines) to an OutputFile (NOTE [Output files]): flushed
// per record to its temporary, renamed over the target by close(). The trainer closes it on every
// way a run ends (done, interrupted, stopped by an error), so every finished step is kept.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "loom/core/output_file.h"

namespace loom::trace {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // "" = disabled
  void write(const nlohmann::json& record);
  // A resumed run continues its metrics file: the records of steps up to `last_step` that the file
  // at `path` holds (if any) are written first, so the file tells the run's whole history; later
  // ones (a resume from an earlier checkpoint) give way to the new run's.
  void carry(const std::string& path, int64_t last_step);
  void close();  // the file appears under its name; later writes are refused
  bool enabled() const { return out_.is_open(); }

 private:
  OutputFile out_;
};

}  // namespace loom::trace
