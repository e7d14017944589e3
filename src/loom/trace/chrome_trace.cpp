#include "loom/trace/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "loom/core/error.h"

namespace loom::trace {

ChromeTrace::ChromeTrace(int rank) : rank_(rank), origin_(Clock::now()) {}

void ChromeTrace::add(std::string name, std::string category, Clock::time_point start, Clock::time_point end,
                      int track) {
  const auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin_).count(); };
  events_.push_back({std::move(name), std::move(category), us(start), us(end) - us(start), track});
}

std::string ChromeTrace::events_json() const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  for (const Event& e : events_) {
    events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start_us},
                      {"dur", e.duration_us}, {"pid", rank_}, {"tid", e.track}});
  }
  return events.dump();
}

void ChromeTrace::write(const std::string& path) const { write_merged(path, {events_json()}); }

// The JSON texts travel as int64 words: an all-gather of the lengths, then of the texts padded to
// the longest.
void ChromeTrace::write_gathered(dist::Communicator& world, const std::string& path) const {
  const std::string mine = events_json();
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), opts);
  at::Tensor lengths = at::empty({world.size()}, opts);
  world.all_gather(length, lengths);
  const int64_t words = (lengths.max().item<int64_t>() + 7) / 8;
  at::Tensor text = at::zeros({words}, opts);
  std::memcpy(text.data_ptr(), mine.data(), mine.size());
  at::Tensor texts = at::empty({world.size() * words}, opts);
  world.all_gather(text, texts);
  if (world.rank() != 0) return;
  std::vector<std::string> all;
  for (int r = 0; r < world.size(); ++r) {
    const char* begin = reinterpret_cast<const char*>(texts.data_ptr<int64_t>() + r * words);
    all.emplace_back(begin, static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  write_merged(path, all);
}

void ChromeTrace::write_merged(const std::string& path, const std::vector<std::string>& ranks_events) {
  nlohmann::json events = nlohmann::json::array();
  for (const std::string& text : ranks_events)
    for (auto& e : nlohmann::json::parse(text)) events.push_back(std::move(e));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    LOOM_CHECK_INPUT(out.good(), "cannot write trace file '{}'", path);
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << '\n';
    LOOM_CHECK(out.good(), "writing trace file '{}' failed", path);
  }
  LOOM_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '{}' to '{}'", tmp, path);
}

}  // namespace loom::trace
