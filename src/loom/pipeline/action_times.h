#pragma once
// The times of one step's actions and layer passes on a rank (NOTE [Step clock]): marked while the
// step runs, settled when its work is queued into busy time, each chunk's mean action costs (the
// simulator's, for `loom profile` and parallel.auto) and the trace's spans.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/step_clock.h"
#include "loom/schedule/simulator.h"

namespace loom::pipeline {

// Called with a span's text, category and interval (the Chrome trace).
using TraceHook = std::function<void(const std::string&, const char*, std::chrono::steady_clock::time_point,
                                     std::chrono::steady_clock::time_point)>;

// The columns of a chunk's measured costs: F, B, W, R and BW (a whole backward).
enum class CostColumn : uint8_t { F, B, W, R, BW };
inline constexpr size_t kCostColumns = 5;

struct SettledTimes {
  double busy_s = 0;  // time in compute actions
  // Per chunk, the mean seconds of its actions: f, b, w, r; a chunk whose backward is never split
  // has b its BW's whole time and w = 0 (one that mixes both, as dualpipe-v does, its B's and W's,
  // and bw its BW's).
  std::vector<schedule::StageCosts> measured;
};

class ActionTimes {
 public:
  // `spans`: keep the layers' passes and the messages for the trace (else only compute actions).
  // Marks a failed step left on `clock` are dropped.
  ActionTimes(StepClock& clock, size_t chunks, bool spans) : clock_(clock), chunks_(chunks), spans_(spans) {
    clock_.discard();
  }

  size_t mark() { return clock_.mark(); }
  bool spans() const { return spans_; }  // whether span texts are kept
  // One layer's pass between marks; kept for the trace only.
  template <class Fn>
  void pass(const std::string& name, const char* category, Fn&& fn) {
    if (!spans_) {
      fn();
      return;
    }
    const size_t begin = clock_.mark();
    fn();
    spans_list_.push_back({name, category, begin, clock_.mark(), 0, -1});
  }
  // A compute action of `chunk`, counted in its column; `text` is read only with spans.
  void compute(const std::string& text, size_t begin, size_t end, size_t chunk, CostColumn column);
  // A message action: a trace span only.
  void message(const std::string& text, size_t begin, size_t end);
  // Settles the clock (waits for the step's queued work), then the measures; each span to `trace`
  // when set.
  SettledTimes settle(const TraceHook& trace);

 private:
  struct Span {
    std::string name;
    const char* category;
    size_t begin, end, chunk;
    int column;  // a CostColumn for a compute action, -1 otherwise
  };
  StepClock& clock_;
  size_t chunks_;
  bool spans_;
  std::vector<Span> spans_list_;
};

}  // namespace loom::pipeline
