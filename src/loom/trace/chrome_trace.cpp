#include "loom/trace/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cstring>

namespace loom::trace {

TraceFile::TraceFile(const std::string& path, int ranks) : out_(path) {
  std::string head = "[";
  for (int r = 0; r < ranks; ++r) {
    head += fmt::format("{}\n{}", r == 0 ? "" : ",",
                        nlohmann::json{{"name", "process_name"}, {"ph", "M"}, {"pid", r},
                                       {"args", {{"name", fmt::format("rank {}", r)}}}}.dump());
    head += ",\n" + nlohmann::json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r},
                                   {"args", {{"sort_index", r}}}}.dump();
  }
  out_.write(head);
  out_.flush();
}

void TraceFile::append(std::string_view events) {
  if (events.empty()) return;
  out_.write(",\n");
  out_.write(events);
  out_.flush();
}

void TraceFile::close() {
  out_.write("\n]\n");
  out_.commit();
}

ChromeTrace::ChromeTrace(int rank) : rank_(rank), origin_(Clock::now()) {}

void ChromeTrace::add(std::string name, std::string category, Clock::time_point start, Clock::time_point end,
                      int track) {
  const auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin_).count(); };
  const std::lock_guard lock(mutex_);
  events_.push_back({std::move(name), std::move(category), us(start), us(end) - us(start), track});
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

// The texts travel as int64 words: an all-gather of the lengths, then of the texts padded to the
// longest. Memory: one step's events of every rank, on every rank, for the length of the call.
void ChromeTrace::flush_gathered(dist::Communicator& world, TraceFile* file) {
  const std::string mine = take_events();
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), opts);
  at::Tensor lengths = at::empty({world.size()}, opts);
  world.all_gather(length, lengths);
  const int64_t words = (lengths.max().item<int64_t>() + 7) / 8;
  if (words == 0) return;
  at::Tensor text = at::zeros({words}, opts);
  std::memcpy(text.data_ptr(), mine.data(), mine.size());
  at::Tensor texts = at::empty({world.size() * words}, opts);
  world.all_gather(text, texts);
  if (file == nullptr) return;
  for (int r = 0; r < world.size(); ++r) {
    const char* begin = reinterpret_cast<const char*>(texts.data_ptr<int64_t>() + r * words);
    file->append(std::string_view(begin, static_cast<size_t>(lengths[r].item<int64_t>())));
  }
}

}  // namespace loom::trace
