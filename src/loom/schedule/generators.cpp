// The generators of parallel.schedule (NOTE [Pipeline schedules are data]): each writes every
// rank's list of compute actions; the validator and simulator (simulator.h) check what they write.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>

#include "loom/core/error.h"
#include "loom/schedule/schedule.h"

namespace loom::schedule {
namespace {

void check_counts(ScheduleKind kind, int64_t stages, int64_t microbatches, int64_t chunks) {
  LOOM_CHECK_INPUT(stages >= 1 && microbatches >= 1 && chunks >= 1,
                   "schedule {}: stages ({}), micro-batches ({}) and chunks ({}) must be >= 1", name_of(kind), stages,
                   microbatches, chunks);
  LOOM_CHECK_INPUT(!v_shaped(kind) || chunks == 1,
                   "schedule {} places two chunks per rank in a V by itself; parallel.chunks = {} cannot be given "
                   "with it; hint: leave parallel.chunks out",
                   name_of(kind), chunks);
  LOOM_CHECK_INPUT(kind == ScheduleKind::Interleaved || v_shaped(kind) || chunks == 1,
                   "schedule {} runs one chunk per rank, not {}; hint: parallel.schedule = \"interleaved\" for "
                   "virtual chunks",
                   name_of(kind), chunks);
  LOOM_CHECK_INPUT(!v_shaped(kind) || stages >= 2, "schedule {} needs pipeline stages (pp >= 2), not {}",
                   name_of(kind), stages);
  LOOM_CHECK_INPUT(!v_shaped(kind) || microbatches >= 2 * stages,
                   "schedule {} needs at least 2 x pp = {} micro-batches per data-parallel rank to fill its V, not "
                   "{}; hint: raise train.global_batch or lower train.micro_batch",
                   name_of(kind), 2 * stages, microbatches);
}

// 1F1B's order on one rank: `warmup` forwards, then one forward and one backward at a time.
// `forward(k)` and `backward(k)` give the k-th of each; the backward is pushed by `emit_backward`.
template <class Fwd, class Bwd>
void one_f_one_b(std::vector<Action>& out, int64_t total, int64_t warmup, Fwd forward, Bwd emit_backward) {
  warmup = std::min(warmup, total);
  for (int64_t k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    emit_backward(k);
  }
  for (int64_t k = total - warmup; k < total; ++k) emit_backward(k);
}

Schedule gpipe(int64_t p, int64_t m) {
  Schedule s{.kind = std::string(name_of(ScheduleKind::GPipe)), .stages = p, .microbatches = m};
  s.ranks.resize(p);
  for (auto& list : s.ranks) {
    for (int64_t i = 0; i < m; ++i) list.push_back({Op::F, i});
    for (int64_t i = 0; i < m; ++i) list.push_back({Op::BW, i});
  }
  return s;
}

Schedule one_f_one_b_schedule(int64_t p, int64_t m, bool recompute_ahead) {
  Schedule s{.kind = std::string(name_of(recompute_ahead ? ScheduleKind::Scp : ScheduleKind::OneFOneB)), .stages = p, .microbatches = m};
  s.ranks.resize(p);
  for (int64_t r = 0; r < p; ++r) {
    auto& list = s.ranks[r];
    // NOTE [Shifted critical path] (Merak): a stage that recomputes issues R(i) before B(i), so
    // the recomputation runs while the gradient of micro-batch i is still on its way instead of
    // after it arrived; the last stage runs B right after F and never recomputes.
    const bool recomputes = recompute_ahead && r + 1 < p;
    one_f_one_b(
        list, m, p - 1 - r, [](int64_t k) { return Action{Op::F, k}; },
        [&](int64_t k) {
          if (recomputes) list.push_back({Op::R, k});
          list.push_back({Op::BW, k});
        });
  }
  return s;
}

// Interleaved 1F1B: rank r holds virtual stages r, r + p, ...; micro-batches go in groups of p,
// each group through chunk 0, then chunk 1, ... (backward: the chunks in reverse).
Schedule interleaved(int64_t p, int64_t m, int64_t c) {
  LOOM_CHECK_INPUT(m % p == 0,
                   "schedule interleaved needs the micro-batches ({}) to be a multiple of the stages ({}); hint: "
                   "change train.global_batch / train.micro_batch",
                   m, p);
  Schedule s{.kind = std::string(name_of(ScheduleKind::Interleaved)), .stages = p, .microbatches = m, .chunks = c};
  s.ranks.resize(p);
  const int64_t total = m * c;
  auto unit = [&](int64_t k, bool backward) {
    const int64_t group = k / (p * c), within = k % (p * c);
    const int64_t chunk = within / p;
    return Action{backward ? Op::BW : Op::F, group * p + within % p, backward ? c - 1 - chunk : chunk};
  };
  for (int64_t r = 0; r < p; ++r) {
    auto& list = s.ranks[r];
    const int64_t warmup = m == p ? total : (p - r - 1) * 2 + (c - 1) * p;
    one_f_one_b(
        list, total, warmup, [&](int64_t k) { return unit(k, false); },
        [&](int64_t k) { list.push_back(unit(k, true)); });
  }
  return s;
}

// ZB-H1 (zero-bubble pipelines): B and W apart. Built by list scheduling at unit costs: a free rank
// runs, in order of preference, a B whose gradient has arrived, an F whose input has arrived while
// fewer than 1F1B's p - r micro-batches wait for their B, or a pending W; so a W fills what would
// be a bubble and the micro-batches between F and B never exceed 1F1B's.
Schedule zb_h1(int64_t p, int64_t m) {
  Schedule s{.kind = std::string(name_of(ScheduleKind::ZbH1)), .stages = p, .microbatches = m};
  s.ranks.resize(p);
  std::vector<std::vector<int64_t>> f_end(p, std::vector<int64_t>(m, -1)), b_end = f_end;
  std::vector<int64_t> next_f(p, 0), next_b(p, 0), next_w(p, 0), busy_until(p, 0);
  int64_t done = 0;
  for (int64_t t = 0; done < p * m * 3; ++t) {
    LOOM_CHECK(t < 10 * p * m + 10 * p, "zb-h1 generation did not finish");
    for (int64_t r = 0; r < p; ++r) {
      if (busy_until[r] > t) continue;
      auto ended = [&](const std::vector<int64_t>& ends, int64_t i) { return ends[i] >= 0 && ends[i] <= t; };
      const int64_t b = next_b[r], f = next_f[r];
      Action a;
      if (b < m && ended(f_end[r], b) && (r + 1 == p || ended(b_end[r + 1], b))) {
        a = {Op::B, b};
        b_end[r][b] = t + 1;
        ++next_b[r];
      } else if (f < m && (r == 0 || ended(f_end[r - 1], f)) && f - b < p - r && b - next_w[r] < p) {
        a = {Op::F, f};
        f_end[r][f] = t + 1;
        ++next_f[r];
      } else if (next_w[r] < next_b[r] && b_end[r][next_w[r]] <= t) {
        a = {Op::W, next_w[r]++};
      } else {
        continue;
      }
      s.ranks[r].push_back(a);
      busy_until[r] = t + 1;
      ++done;
    }
  }
  return s;
}

// ZB-V (NOTE [V-shaped pipelines]): list scheduling at unit costs over the V's virtual stages.
Schedule zb_v(int64_t p, int64_t m) {
  Schedule s{.kind = std::string(name_of(ScheduleKind::ZbV)), .stages = p, .microbatches = m, .chunks = 2,
             .placement = Placement::V};
  s.ranks.resize(p);
  const int64_t stages = 2 * p;
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // Per virtual stage: the tick each micro-batch's F and B end, and the next of each to run.
  std::vector<std::vector<int64_t>> f_end(stages, std::vector<int64_t>(m, kNever)), b_end = f_end;
  std::vector<int64_t> next_f(stages, 0), next_b(stages, 0), live(p, 0);
  std::vector<std::deque<Action>> pending_w(p);
  int64_t done = 0;
  for (int64_t t = 0; done < 6 * p * m; ++t) {
    LOOM_CHECK(t < 20 * p * m + 10 * p, "zb-v generation did not finish");
    for (int64_t r = 0; r < p; ++r) {
      // The candidates of each kind, the earlier micro-batch first, then the later virtual stage.
      std::optional<std::pair<int64_t, int64_t>> b, f;  // (micro-batch, -v)
      for (int64_t chunk = 0; chunk < 2; ++chunk) {
        const int64_t v = s.virtual_stage(r, chunk), i = next_b[v], j = next_f[v];
        const std::pair<int64_t, int64_t> none{m, 0};
        if (i < m && f_end[v][i] <= t && (v + 1 == stages || b_end[v + 1][i] <= t)) b = std::min(b.value_or(none), {i, -v});
        if (j < m && live[r] < 2 * p && (v == 0 || f_end[v - 1][j] <= t)) f = std::min(f.value_or(none), {j, -v});
      }
      Action a;
      if (b) {
        const int64_t v = -b->second;
        a = {Op::B, b->first, s.chunk_of(v)};
        b_end[v][next_b[v]++] = t + 1;
        pending_w[r].push_back({Op::W, a.mb, a.chunk});
      } else if (f) {
        const int64_t v = -f->second;
        a = {Op::F, f->first, s.chunk_of(v)};
        f_end[v][next_f[v]++] = t + 1;
        ++live[r];
      } else if (!pending_w[r].empty()) {
        a = pending_w[r].front();
        pending_w[r].pop_front();
        --live[r];
      } else {
        continue;
      }
      s.ranks[r].push_back(a);
      ++done;
    }
  }
  return s;
}


// DualPipeV (NOTE [Overlapped pairs]): one rank's list, phase by phase. Each chunk runs its F and
// its backward in micro-batch order; `split` backwards leave their W to a queue that W pops
// oldest first.
class DualPipeVRank {
 public:
  explicit DualPipeVRank(std::vector<Action>& out) : out_(out) {}
  void f(int64_t chunk) { out_.push_back({Op::F, next_f_[chunk]++, chunk}); }
  void b(int64_t chunk, bool split) {
    const int64_t mb = next_b_[chunk]++;
    out_.push_back({split ? Op::B : Op::BW, mb, chunk});
    if (split) weights_.push_back({Op::W, mb, chunk});
  }
  void w() {
    LOOM_CHECK(!weights_.empty(), "dualpipe-v: a W with no B apart before it");
    out_.push_back(weights_.front());
    weights_.pop_front();
  }
  // The forward of `forward_chunk` overlapped with the (whole) backward of the other chunk.
  void f_and_b(int64_t forward_chunk) {
    f(forward_chunk);
    out_.back().paired = true;
    b(1 - forward_chunk, false);
  }
  bool done() const { return weights_.empty(); }

 private:
  std::vector<Action>& out_;
  int64_t next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::deque<Action> weights_;
};

Schedule dualpipe_v(int64_t p, int64_t m) {
  Schedule s{.kind = std::string(name_of(ScheduleKind::DualPipeV)), .stages = p, .microbatches = m, .chunks = 2,
             .placement = Placement::V};
  s.ranks.resize(p);
  for (int64_t r = 0; r < p; ++r) {
    DualPipeVRank k(s.ranks[r]);
    const int64_t below = p - 1 - r;  // ranks after this one on the way down
    for (int64_t i = 0; i < 2 * below; ++i) k.f(0);
    for (int64_t i = 0; i <= r; ++i) k.f(0), k.f(1);
    for (int64_t i = 0; i < below; ++i) k.b(1, true), k.w(), k.f(1);
    for (int64_t i = 0; i < m - 2 * p + r + 1; ++i) {
      if (i == 0 && below == 0) k.f(0), k.b(1, false);  // the turn's rank: its first pair is not overlapped
      else k.f_and_b(0);
      k.f_and_b(1);
    }
    for (int64_t i = 0; i < below; ++i) k.b(1, false), k.f_and_b(1);
    // The drain: whole backwards for the first half, then B apart from W (from chunk 1's B on odd
    // ranks, chunk 0's on even ones), the Ws filling the wait for the next gradient.
    for (int64_t i = 0; i <= r; ++i) {
      const int64_t half = (r + 1) / 2;
      k.b(1, r % 2 == 1 ? i >= half : i > half);
      k.b(0, i >= half);
    }
    for (int64_t i = 0; i < below; ++i) k.w(), k.b(0, true);
    for (int64_t i = 0; i <= r; ++i) k.w();
    LOOM_CHECK(k.done(), "dualpipe-v: rank {} left weight gradients unscheduled", r);
  }
  return s;
}

}  // namespace

Schedule make_schedule(Option<ScheduleKind> kind, int64_t stages, int64_t microbatches, int64_t chunks) {
  check_counts(kind, stages, microbatches, chunks);
  switch (kind.value) {
    case ScheduleKind::GPipe: return gpipe(stages, microbatches);
    case ScheduleKind::OneFOneB: return one_f_one_b_schedule(stages, microbatches, false);
    case ScheduleKind::Scp: return one_f_one_b_schedule(stages, microbatches, true);
    case ScheduleKind::Interleaved: return interleaved(stages, microbatches, chunks);
    case ScheduleKind::ZbH1: return zb_h1(stages, microbatches);
    case ScheduleKind::ZbV: return zb_v(stages, microbatches);
    case ScheduleKind::DualPipeV: return dualpipe_v(stages, microbatches);
  }
  throw Error(fmt::format("schedule kind {} has no generator", static_cast<int>(kind.value)));
}

}  // namespace loom::schedule
