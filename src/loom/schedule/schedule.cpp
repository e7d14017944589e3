#include "loom/schedule/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <deque>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "loom/core/error.h"
#include "loom/schedule/simulator.h"

namespace loom::schedule {
namespace {

constexpr std::string_view kVPlacementLine = "# placement: v";  // NOTE [V-shaped pipelines]

constexpr std::pair<Op, std::string_view> kOpNames[] = {
    {Op::BW, "BW"},        {Op::F, "F"},          {Op::B, "B"},         {Op::W, "W"},        {Op::R, "R"},
    {Op::SendF, "sendF"},  {Op::RecvF, "recvF"},  {Op::SendB, "sendB"}, {Op::RecvB, "recvB"}};

std::string_view op_name(Op op) {
  for (auto [o, name] : kOpNames)
    if (o == op) return name;
  return "?";
}

bool parse_int(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return "";
  return std::string(s.substr(first, s.find_last_not_of(" \t\r") - first + 1));
}

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

}  // namespace

std::string Action::text(bool with_chunk) const {
  return fmt::format("{}{}{}", with_chunk ? std::to_string(chunk) : "", op_name(op), mb);
}

Action parse_action(std::string_view text, const std::string& where) {
  const size_t letters = text.find_first_not_of("0123456789");
  const size_t digits = letters == std::string_view::npos ? letters : text.find_first_of("0123456789", letters);
  Action a;
  bool ok = letters != std::string_view::npos && digits != std::string_view::npos;
  if (ok && letters > 0) ok = parse_int(text.substr(0, letters), a.chunk);
  if (ok) ok = parse_int(text.substr(digits), a.mb);
  if (ok) {
    const std::string_view name = text.substr(letters, digits - letters);
    ok = false;
    for (auto [op, n] : kOpNames)
      if (n == name) a.op = op, ok = true;
  }
  LOOM_CHECK_INPUT(ok,
                   "{}: '{}' is not an action; hint: F3, B3, W3, BW3 or R3 for micro-batch 3, with the chunk as a "
                   "prefix (1F3) in interleaved schedules",
                   where, text);
  return a;
}

Schedule make_schedule(Option<ScheduleKind> kind, int64_t stages, int64_t microbatches, int64_t chunks) {
  check_counts(kind, stages, microbatches, chunks);
  switch (kind.value) {
    case ScheduleKind::GPipe: return gpipe(stages, microbatches);
    case ScheduleKind::OneFOneB: return one_f_one_b_schedule(stages, microbatches, false);
    case ScheduleKind::Scp: return one_f_one_b_schedule(stages, microbatches, true);
    case ScheduleKind::Interleaved: return interleaved(stages, microbatches, chunks);
    case ScheduleKind::ZbH1: return zb_h1(stages, microbatches);
    case ScheduleKind::ZbV: return zb_v(stages, microbatches);
  }
  throw Error(fmt::format("schedule kind {} has no generator", static_cast<int>(kind.value)));
}

std::string to_csv(const Schedule& s) {
  std::string out = s.placement == Placement::V ? std::string(kVPlacementLine) + "\nstep" : "step";
  for (int64_t r = 0; r < s.stages; ++r) out += fmt::format(",rank{}", r);
  out += '\n';
  size_t rows = 0;
  for (const auto& list : s.ranks) rows = std::max(rows, list.size());
  for (size_t i = 0; i < rows; ++i) {
    out += std::to_string(i);
    for (const auto& list : s.ranks) {
      out += ',';
      if (i < list.size()) out += list[i].text(s.chunks > 1);
    }
    out += '\n';
  }
  return out;
}

Schedule from_csv(const std::string& text, const std::string& where) {
  std::istringstream in(text);
  std::string line;
  Schedule s{.kind = "csv"};
  int64_t row = 0, max_mb = -1, max_chunk = 0;
  while (std::getline(in, line)) {
    ++row;
    if (trim(line).empty()) continue;
    if (trim(line).starts_with('#')) {  // a comment, or the V placement's line before the header
      LOOM_CHECK_INPUT(trim(line) != kVPlacementLine || s.ranks.empty(),
                       "{} line {}: '{}' must come before the header line", where, row, kVPlacementLine);
      if (trim(line) == kVPlacementLine) s.placement = Placement::V;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream cols(line);
    for (std::string cell; std::getline(cols, cell, ',');) cells.push_back(trim(cell));
    if (!line.empty() && line.back() == ',') cells.push_back("");
    if (s.ranks.empty()) {
      LOOM_CHECK_INPUT(cells.size() >= 2 && cells[0] == "step",
                       "{}: the first line must be the header 'step,rank0,rank1,...', not '{}'", where, trim(line));
      s.ranks.resize(cells.size() - 1);
      continue;
    }
    LOOM_CHECK_INPUT(cells.size() <= s.ranks.size() + 1, "{} line {}: {} cells, but the header names {} ranks", where,
                     row, cells.size(), s.ranks.size());
    for (size_t c = 1; c < cells.size(); ++c) {
      if (cells[c].empty() || cells[c] == ".") continue;
      const Action a = parse_action(cells[c], fmt::format("{} line {}", where, row));
      LOOM_CHECK_INPUT(!a.is_message(), "{} line {}: '{}': messages are inserted by loom, not listed", where, row,
                       cells[c]);
      s.ranks[c - 1].push_back(a);
      max_mb = std::max(max_mb, a.mb);
      max_chunk = std::max(max_chunk, a.chunk);
    }
  }
  LOOM_CHECK_INPUT(!s.ranks.empty() && max_mb >= 0, "{}: no actions", where);
  // A complete schedule lists an F of every micro-batch and chunk on every rank, so its counts
  // cannot exceed a rank's list; refusing here keeps one action (F99999999999) from making the
  // validator size its tables by that count instead of by the file.
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const auto n = static_cast<int64_t>(s.ranks[r].size());
    LOOM_CHECK_INPUT(max_mb < n && max_chunk < n && (max_mb + 1) * (max_chunk + 1) <= n,
                     "{}: the actions name micro-batches up to {} and chunks up to {}, but rank {} lists {} actions, "
                     "fewer than the forwards alone of that many micro-batches and chunks; hint: number micro-batches "
                     "and chunks from 0",
                     where, max_mb, max_chunk, r, n);
  }
  s.stages = static_cast<int64_t>(s.ranks.size());
  s.microbatches = max_mb + 1;
  s.chunks = max_chunk + 1;
  // A V holds chunks 0 and 1 of every rank: a chunk 2 has no virtual stage, and a rank without
  // chunk 1's actions leaves its stage to no one.
  LOOM_CHECK_INPUT(s.placement != Placement::V || s.chunks == 2,
                   "{}: a V-placed schedule ('{}') holds chunks 0 and 1 on each rank, but its actions name chunks 0 "
                   "to {}; hint: rank r runs chunk 0 (virtual stage r) and chunk 1 (virtual stage 2 stages - 1 - r)",
                   where, kVPlacementLine, max_chunk);
  return s;
}

Schedule read_csv(const std::string& path) {
  std::ifstream in(path);
  LOOM_CHECK_INPUT(in.good(), "cannot read the schedule file {}", path);
  std::stringstream text;
  text << in.rdbuf();
  return from_csv(text.str(), path);
}

std::vector<std::vector<Action>> lower(const Schedule& s) {
  std::vector<std::vector<Action>> out(s.ranks.size());
  const int64_t last = s.virtual_stages() - 1;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    for (const Action& a : s.ranks[r]) {
      const int64_t v = s.virtual_stage(static_cast<int64_t>(r), a.chunk);
      const bool backward = a.op == Op::B || a.op == Op::BW;
      if (a.op == Op::F && v > 0) out[r].push_back({Op::RecvF, a.mb, a.chunk});
      if (backward && v < last) out[r].push_back({Op::RecvB, a.mb, a.chunk});
      out[r].push_back(a);
      if (a.op == Op::F && v < last) out[r].push_back({Op::SendF, a.mb, a.chunk});
      if (backward && v > 0) out[r].push_back({Op::SendB, a.mb, a.chunk});
    }
  }
  return out;
}

Schedule schedule_for(const std::string& spec, int64_t stages, int64_t microbatches, int64_t chunks) {
  if (!spec.starts_with("csv:")) return make_schedule(option_from<ScheduleKind>("parallel.schedule", spec), stages, microbatches, chunks);
  const std::string path = spec.substr(4);
  Schedule s = read_csv(path);
  LOOM_CHECK_INPUT(s.stages == stages && s.microbatches == microbatches && s.chunks == chunks,
                   "{}: a schedule of {} stages, {} micro-batches and {} chunks; this run has pp = {}, {} "
                   "micro-batches per data-parallel rank and chunks = {}",
                   path, s.stages, s.microbatches, s.chunks, stages, microbatches, chunks);
  return s;
}

}  // namespace loom::schedule
