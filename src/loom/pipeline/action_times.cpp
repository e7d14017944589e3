#include "loom/pipeline/action_times.h"

namespace loom::pipeline {

void ActionTimes::compute(const std::string& text, size_t begin, size_t end, size_t chunk, CostColumn column) {
  spans_list_.push_back({spans_ ? text : std::string(), "pipeline", begin, end, chunk, static_cast<int>(column)});
}

void ActionTimes::message(const std::string& text, size_t begin, size_t end) {
  if (spans_) spans_list_.push_back({text, "pipeline message", begin, end, 0, -1});
}

SettledTimes ActionTimes::settle(const TraceHook& trace) {
  const std::vector<StepClock::Clock::time_point> at = clock_.settle();
  std::vector<std::array<double, kCostColumns>> seconds(chunks_, {0, 0, 0, 0, 0}), counts(seconds);
  SettledTimes out;
  for (const Span& s : spans_list_) {
    if (s.column >= 0) {
      const double took = std::chrono::duration<double>(at[s.end] - at[s.begin]).count();
      out.busy_s += took;
      seconds[s.chunk][static_cast<size_t>(s.column)] += took;
      counts[s.chunk][static_cast<size_t>(s.column)] += 1;
    }
    if (trace && spans_) trace(s.name, s.category, at[s.begin], at[s.end]);
  }
  spans_list_.clear();
  for (size_t c = 0; c < chunks_; ++c) {
    auto mean = [&](CostColumn k) {
      const auto i = static_cast<size_t>(k);
      return counts[c][i] > 0 ? seconds[c][i] / counts[c][i] : 0.0;
    };
    // A chunk that never splits its backward has b its BW's time (w = 0); one that mixes both, as
    // dualpipe-v does, its B's and W's, and bw its BW's.
    const bool split = counts[c][static_cast<size_t>(CostColumn::B)] > 0;
    out.measured.push_back({.f = mean(CostColumn::F), .b = mean(split ? CostColumn::B : CostColumn::BW),
                            .w = mean(CostColumn::W), .r = mean(CostColumn::R),
                            .bw = split ? mean(CostColumn::BW) : 0.0});
  }
  return out;
}

}  // namespace loom::pipeline
