#pragma once
// Writes one JSON object per line (JSON Lines) under the path the user gave, each record appended
// whole as it comes (NOTE [Live output files]): readable while the run goes and complete up to the
// last finished step however the run ends.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "loom/core/live_file.h"

namespace loom::trace {

class MetricsWriter {
 public:
  MetricsWriter() = default;  // disabled
  // `file` (LiveFile::open'ed; a closed one: disabled) from its start, or, for a run resumed after
  // step `resumed_step` (> 0), continued: its records of steps up to `resumed_step` stay (the run's
  // history before the checkpoint), later ones give way to the records the resumed run writes.
  MetricsWriter(LiveFile file, int64_t resumed_step);
  void write(const nlohmann::json& record);
  void close();  // later writes are dropped; thread-safe (NOTE [Live output files])
  bool enabled() const { return out_.is_open(); }

 private:
  LiveFile out_;
};

}  // namespace loom::trace
