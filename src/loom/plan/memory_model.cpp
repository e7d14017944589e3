#include "loom/plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "loom/schedule/simulator.h"

namespace loom::plan {
namespace {

using nn::MemoryPolicy;
using schedule::Op;

// What one virtual stage's layers hold for one micro-batch, by policy.
struct StageBytes {
  double kept = 0;        // saved state of the layers that keep it
  double inputs = 0;      // inputs of the layers that recompute
  double recomputed = 0;  // their saved state once rebuilt (at an R)
  double swapped = 0;     // saved state of the layers that swap
  // The busiest layer's moment beyond the replay (NOTE [Backward moments]): in a BW, and in a
  // split B, which frees nothing before its W.
  double transient = 0, transient_split = 0;
  int64_t layers = 0;
  // Each swapping layer: the share of the forward's time when its state is complete (its copy
  // out may start), and its bytes.
  std::vector<std::pair<double, double>> swaps;
};


// NOTE [Backward moments]: a layer's backward needs its temporaries (nn::Cost::workspace_bytes;
// a recomputing layer its rebuilt state too, recompute_moment) on top of what the micro-batch
// holds when it starts. In a BW the layers run last to first and each frees its state (a
// recomputing one its input) once its weight gradient is taken, so layer l's moment stands beside
// the micro-batch's state less what the layers after it freed; the first layer to run (the
// chunk's last) has nothing freed yet: a stage of kept attention blocks measured 13 x [rows,
// d_model] beyond the replay (issue 33), where the model had counted none. A split B frees
// nothing before its W, and each layer keeps its output gradient for its weight gradient
// (boundary_bytes each, held from the B to the W).
void backward_moments(const MemoryModel& m, const std::vector<int64_t>& cuts, const std::vector<MemoryPolicy>& policy,
                      int64_t v, StageBytes& out) {
  double freed = 0;
  for (int64_t i = cuts[v + 1]; i-- > cuts[v];) {
    const LayerCosts& l = m.layers[i];
    const MemoryPolicy p = policy[i];
    const double moment = p == MemoryPolicy::Recompute ? recompute_moment(l) : l.workspace_bytes;
    out.transient = std::max(out.transient, moment - freed);
    out.transient_split = std::max(out.transient_split, moment);
    freed += p == MemoryPolicy::Recompute ? l.input_bytes : l.saved_bytes;
  }
}

StageBytes stage_bytes(const MemoryModel& m, const std::vector<int64_t>& cuts, const std::vector<MemoryPolicy>& policy,
                       int64_t v) {
  StageBytes out;
  double forward = 0, done = 0;
  for (int64_t i = cuts[v]; i < cuts[v + 1]; ++i) forward += m.layers[i].forward_s;
  for (int64_t i = cuts[v]; i < cuts[v + 1]; ++i) {
    const LayerCosts& l = m.layers[i];
    const MemoryPolicy p = policy[i];
    done += l.forward_s;
    if (p == MemoryPolicy::Keep) out.kept += l.saved_bytes;
    if (p == MemoryPolicy::Swap) out.swapped += l.saved_bytes, out.swaps.emplace_back(forward > 0 ? done / forward : 1, l.saved_bytes);
    if (p == MemoryPolicy::Recompute) out.inputs += l.input_bytes, out.recomputed += l.saved_bytes;
  }
  out.layers = cuts[v + 1] - cuts[v];
  backward_moments(m, cuts, policy, v, out);
  return out;
}

schedule::Costs stage_costs(const MemoryModel& m, const std::vector<int64_t>& cuts,
                            const std::vector<MemoryPolicy>& policy, const Prediction& waits) {
  schedule::Costs costs{.p2p = m.p2p_s};
  for (size_t v = 0; v + 1 < cuts.size(); ++v) {
    schedule::StageCosts c{.f = waits.swap_wait_forward_s[v], .b = waits.swap_wait_backward_s[v], .w = 0, .r = 0};
    for (int64_t i = cuts[v]; i < cuts[v + 1]; ++i) {
      const LayerCosts& l = m.layers[i];
      c.f += l.forward_s, c.b += l.backward_input_s, c.w += l.backward_weight_s;
      if (policy[i] == MemoryPolicy::Recompute) c.r += l.forward_s;
    }
    costs.stages.push_back(c);
  }
  return costs;
}

// One rank's replay (NOTE [Memory cost model]): activation bytes over time, the copy engine's
// jobs in the order the executor queues them, and each backward's wait for its copy back.
struct Replay {
  // What one (micro-batch, chunk) holds and where its copies are.
  struct Slot {
    double out_end = 0, in_end = 0, held = 0;
    bool copied_out = false, fetched = false, rebuilt = false;
  };
  explicit Replay(size_t slots) : slots(slots) {}

  std::vector<std::pair<double, double>> events;  // (time, bytes added or freed)
  std::vector<std::pair<double, double>> host;    // the same for the host tier
  std::vector<std::pair<double, double>> messages;  // and for the stage boundaries' buffers
  double engine_free = 0;
  std::vector<Slot> slots;  // by micro-batch x chunks + chunk
  double last_out_end = 0;  // the latest copy out's end: the next forward waits for it

  void add(double t, double bytes) { events.emplace_back(t, bytes); }
  // A message's buffer, from when it is sent (or received) until it is taken (or freed)
  // (NOTE [Stage boundaries in the replay]).
  void message(double from, double to, double bytes) {
    if (bytes <= 0) return;
    messages.emplace_back(from, bytes);
    messages.emplace_back(std::max(from, to), -bytes);
  }
  // The copy back of slot `key`, queued at `t`; the engine runs jobs in order.
  void fetch(size_t key, double t, double bytes, double bw) {
    Slot& s = slots[key];
    if (s.fetched || bytes <= 0) return;
    s.fetched = true;
    const double start = std::max({t, engine_free, s.out_end});
    engine_free = s.in_end = start + bytes / bw;
    add(start, bytes);
    host.emplace_back(engine_free, -bytes);
  }
  // A forward ran from `begin` to `end`: what it keeps is held from its end; each swapping
  // layer's state from when that layer is done until the engine has copied it out.
  void forward(size_t key, double begin, double end, const StageBytes& b, double bw) {
    Slot& s = slots[key];
    add(end, b.kept + b.inputs);
    s.held = b.kept + b.inputs;
    for (const auto& [share, bytes] : b.swaps) {
      const double ready = begin + share * (end - begin), start = std::max(ready, engine_free);
      add(ready, bytes);
      engine_free = s.out_end = last_out_end = start + bytes / bw;
      s.copied_out = true;
      add(engine_free, -bytes);
      host.emplace_back(start, bytes);
    }
  }
  // An R, or a split B that recomputes without one, ended at `t`: the rebuilt state is held
  // until the W (and the inputs it was rebuilt from are released).
  void rebuild(size_t key, double t, const StageBytes& b) {
    Slot& s = slots[key];
    if (std::exchange(s.rebuilt, true)) return;
    add(t, b.recomputed - b.inputs);
    s.held += b.recomputed - b.inputs;
  }
  // A backward starts at `t`: the swapped state comes back (fetched now if not ahead); returns
  // how long the backward waits for it.
  double backward(size_t key, double t, const StageBytes& b, double bw) {
    slots[key].held += b.swapped;
    if (b.swapped <= 0) return 0;
    fetch(key, t, b.swapped, bw);
    return std::max(0.0, slots[key].in_end - t);
  }
  static double peak(std::vector<std::pair<double, double>> e) {
    // At one instant, what is freed goes first: a copy engine's next job starts when the last
    // one ended, and a rank's next action when its last one freed what it held.
    std::sort(e.begin(), e.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second < b.second;
    });
    double now = 0, most = 0;
    for (const auto& [t, bytes] : e) most = std::max(most, now += bytes);
    return most;
  }
};

bool is_backward(Op op) { return op == Op::B || op == Op::BW; }

// When each (micro-batch, virtual stage)'s forward and backward (B or BW) started, on whichever
// rank: when the messages to them were received (the executor receives just before each).
struct ActionStarts {
  std::map<std::pair<int64_t, int64_t>, double> forward, backward;
};

ActionStarts action_starts(const schedule::Schedule& s, const schedule::Simulation& sim) {
  ActionStarts out;
  for (int64_t r = 0; r < s.stages; ++r)
    for (const schedule::TimedAction& t : sim.ranks[r]) {
      const std::pair<int64_t, int64_t> key{t.action.mb, s.virtual_stage(r, t.action.chunk)};
      if (t.action.op == Op::F) out.forward[key] = t.start;
      if (is_backward(t.action.op)) out.backward[key] = t.start;
    }
  return out;
}

// NOTE [Stage boundaries in the replay]: the messages of one action of virtual stage `v` (the
// output sent on, the input gradient sent back, the output gradient received), and a split B's
// output gradients kept for its W (NOTE [Backward moments]). `since`: per (micro-batch, virtual
// stage), when the output gradient arrived and when the B ended.
struct Since {
  std::map<std::pair<int64_t, int64_t>, double> gradient, split;
};

void boundary_messages(const MemoryModel& m, const ActionStarts& starts, const schedule::TimedAction& t, int64_t v,
                       const StageBytes& b, Since& since, Replay& rp) {
  const int64_t last = m.schedule.virtual_stages() - 1, mb = t.action.mb;
  const std::pair<int64_t, int64_t> key{mb, v};
  const Op op = t.action.op;
  const double bytes = m.boundary_bytes;
  if (op == Op::F && v < last) rp.message(t.end, starts.backward.at(key), bytes);  // taken by then at the latest
  if (is_backward(op) && v > 0) rp.message(t.end, starts.backward.at({mb, v - 1}), bytes);
  if (op == Op::B) since.split[key] = t.end;
  if (op == Op::W) rp.message(since.split.at(key), t.end, static_cast<double>(b.layers) * bytes);
  if (v == last) return;
  if (is_backward(op)) since.gradient[key] = t.start;
  if (op == Op::W || op == Op::BW) rp.message(since.gradient.at(key), t.end, bytes);
}

struct RankReplay {
  StagePrediction memory;
  std::map<int64_t, double> forward_wait, backward_wait;  // per virtual stage: the longest
};

RankReplay replay_rank(const MemoryModel& m, const schedule::Simulation& sim, const ActionStarts& starts, int64_t r,
                       const std::vector<StageBytes>& bytes) {
  const auto& list = sim.ranks[r];
  const schedule::Schedule& s = m.schedule;
  Replay rp(static_cast<size_t>(s.microbatches * s.chunks));
  RankReplay out;
  auto key_of = [&](const schedule::TimedAction& t) { return static_cast<size_t>(t.action.mb * s.chunks + t.action.chunk); };
  Since since;  // NOTE [Stage boundaries in the replay]
  auto swapped = [&](const schedule::TimedAction& t) { return bytes[s.virtual_stage(r, t.action.chunk)].swapped; };
  // The executor queues the copy back of the next backward's micro-batch before and after each action.
  auto prefetch_next = [&](size_t i, double t) {
    if (i + 1 >= list.size() || !is_backward(list[i + 1].action.op)) return;
    const auto key = key_of(list[i + 1]);
    if (rp.slots[key].copied_out) rp.fetch(key, t, swapped(list[i + 1]), m.copy_bytes_per_s);
  };
  for (size_t i = 0; i < list.size(); ++i) {
    const schedule::TimedAction& t = list[i];
    const auto key = key_of(t);
    const StageBytes& b = bytes[s.virtual_stage(r, t.action.chunk)];
    prefetch_next(i, t.start);
    const double bw = m.copy_bytes_per_s;
    const int64_t v = s.virtual_stage(r, t.action.chunk);
    if (t.action.op == Op::F) {
      out.forward_wait[v] = std::max(out.forward_wait[v], rp.last_out_end - t.start);
      rp.forward(key, t.start, t.end, b, bw);
    }
    if (t.action.op == Op::R || t.action.op == Op::B) rp.rebuild(key, t.end, b);
    if (is_backward(t.action.op)) out.backward_wait[v] = std::max(out.backward_wait[v], rp.backward(key, t.start, b, bw));
    boundary_messages(m, starts, t, v, b, since, rp);
    if (t.action.op == Op::W || t.action.op == Op::BW) rp.add(t.end, -rp.slots[key].held);
    prefetch_next(i, t.end);
    if (t.action.op == Op::B) out.memory.transient_bytes = std::max(out.memory.transient_bytes, b.transient_split);
    if (t.action.op == Op::BW) out.memory.transient_bytes = std::max(out.memory.transient_bytes, b.transient);
  }
  out.memory.activation_bytes = Replay::peak(rp.events);
  rp.messages.insert(rp.messages.end(), rp.events.begin(), rp.events.end());
  out.memory.boundary_bytes = Replay::peak(std::move(rp.messages)) - out.memory.activation_bytes;
  out.memory.host_bytes = Replay::peak(rp.host);
  return out;
}

}  // namespace

double recompute_moment(const LayerCosts& l) { return l.saved_bytes + std::max(l.saved_bytes, l.workspace_bytes); }

Prediction predict(const MemoryModel& m, const std::vector<int64_t>& cuts, const std::vector<MemoryPolicy>& policy) {
  const schedule::Schedule& s = m.schedule;
  std::vector<StageBytes> bytes;
  for (int64_t v = 0; v < s.virtual_stages(); ++v) bytes.push_back(stage_bytes(m, cuts, policy, v));
  Prediction out;
  out.swap_wait_forward_s.assign(static_cast<size_t>(s.virtual_stages()), 0.0);
  out.swap_wait_backward_s = out.swap_wait_forward_s;
  // Twice: the waits for copies found on the first replay lengthen the actions of the second.
  for (int pass = 0; pass < 2; ++pass) {
    schedule::Simulation sim = schedule::simulate(s, stage_costs(m, cuts, policy, out));
    out.step_s = sim.makespan;
    out.stages.clear();
    std::vector<double> forward(out.swap_wait_forward_s.size(), 0.0), backward(forward);
    const ActionStarts starts = action_starts(s, sim);
    for (int64_t r = 0; r < s.stages; ++r) {
      RankReplay rr = replay_rank(m, sim, starts, r, bytes);
      out.stages.push_back(rr.memory);
      for (const auto& [v, t] : rr.forward_wait) forward[v] = std::max(t, 0.0);
      for (const auto& [v, t] : rr.backward_wait) backward[v] = t;
    }
    const auto none = [](const std::vector<double>& w) {
      return std::all_of(w.begin(), w.end(), [](double t) { return t == 0; });
    };
    if (pass == 1 || (none(forward) && none(backward))) {
      out.simulation = std::move(sim);
      break;
    }
    out.swap_wait_forward_s = std::move(forward), out.swap_wait_backward_s = std::move(backward);
  }
  return out;
}

}  // namespace loom::plan
