#include "loom/trace/chrome_trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "loom/dist/gather_text.h"

namespace loom::trace {

std::string trace_head(int ranks) {
  std::string head = "[";
  for (int r = 0; r < ranks; ++r) {
    head += fmt::format("{}\n{}", r == 0 ? "" : ",",
                        nlohmann::json{{"name", "process_name"}, {"ph", "M"}, {"pid", r},
                                       {"args", {{"name", fmt::format("rank {}", r)}}}}.dump());
    head += ",\n" + nlohmann::json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r},
                                   {"args", {{"sort_index", r}}}}.dump();
    for (auto [track, name] : {std::pair{kComputeTrack, "compute"}, std::pair{kSwapTrack, "swap copies"},
                               std::pair{kGradientTrack, "gradient reduction"}})
      head += ",\n" + nlohmann::json{{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", track},
                                     {"args", {{"name", name}}}}.dump();
  }
  return head;
}

TraceFile::TraceFile(LiveFile file, int ranks) : out_(std::move(file)) {
  out_.start();
  out_.append(trace_head(ranks));
}

void TraceFile::append(std::string_view events) {
  if (events.empty()) return;
  out_.append(",\n" + std::string(events));  // one write: the file ends in a whole event
}

ChromeTrace::ChromeTrace(int rank) : rank_(rank), origin_(Clock::now()) {}

void ChromeTrace::add(std::string name, std::string category, Clock::time_point start, Clock::time_point end,
                      int track) {
  const auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin_).count(); };
  const std::lock_guard lock(mutex_);
  events_.push_back({std::move(name), std::move(category), us(start), us(end) - us(start), track});
}

void ChromeTrace::add_at(std::string name, std::string category, double start_s, double duration_s, int track) {
  const std::lock_guard lock(mutex_);
  events_.push_back({std::move(name), std::move(category), start_s * 1e6, duration_s * 1e6, track});
}

size_t ChromeTrace::pending() const {
  const std::lock_guard lock(mutex_);
  return events_.size();
}

std::string ChromeTrace::take_events() {
  std::vector<Event> events;
  {
    const std::lock_guard lock(mutex_);
    events.swap(events_);
  }
  std::string text;
  for (const Event& e : events) {
    if (!text.empty()) text += ",\n";
    text += nlohmann::json{{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start_us},
                           {"dur", e.duration_us}, {"pid", rank_}, {"tid", e.track}}
                .dump();
  }
  return text;
}

// One step's events of every rank, on every rank, for the length of the call (dist::all_gather_text).
void ChromeTrace::flush_gathered(dist::Communicator& world, TraceFile* file) {
  const std::vector<std::string> texts = dist::all_gather_text(world, take_events());
  if (file == nullptr) return;
  for (const std::string& text : texts) file->append(text);
}

}  // namespace loom::trace
