#include "loom/schedule/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"

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

std::string to_csv(const Schedule& s) {
  std::string out = s.placement == Placement::V ? std::string(kVPlacementLine) + "\nstep" : "step";
  for (int64_t r = 0; r < s.stages; ++r) out += fmt::format(",rank{}", r);
  out += '\n';
  std::vector<std::vector<std::string>> cells(s.ranks.size());  // per rank: an action or an overlapped pair each
  size_t rows = 0;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& list = s.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      std::string cell = list[i].text(s.chunks > 1);
      if (list[i].paired && i + 1 < list.size()) cell += "&" + list[++i].text(s.chunks > 1);
      cells[r].push_back(std::move(cell));
    }
    rows = std::max(rows, cells[r].size());
  }
  for (size_t i = 0; i < rows; ++i) {
    out += std::to_string(i);
    for (const auto& column : cells) out += ',' + (i < column.size() ? column[i] : std::string());
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
      // One action, or an overlapped pair `F3&1BW5` (NOTE [Overlapped pairs]; the simulator
      // checks what it pairs).
      const std::string_view cell = cells[c];
      const size_t amp = cell.find('&');
      std::vector<std::string_view> texts{cell.substr(0, amp)};
      if (amp != cell.npos) texts.push_back(cell.substr(amp + 1));
      for (size_t k = 0; k < texts.size(); ++k) {
        Action a = parse_action(trim(texts[k]), fmt::format("{} line {}", where, row));
        LOOM_CHECK_INPUT(!a.is_message(), "{} line {}: '{}': messages are inserted by loom, not listed", where, row,
                         cells[c]);
        a.paired = k == 0 && texts.size() == 2;
        s.ranks[c - 1].push_back(a);
        max_mb = std::max(max_mb, a.mb);
        max_chunk = std::max(max_chunk, a.chunk);
      }
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
    const auto& list = s.ranks[r];
    auto stage = [&](const Action& a) { return s.virtual_stage(static_cast<int64_t>(r), a.chunk); };
    auto backward = [](const Action& a) { return a.op == Op::B || a.op == Op::BW; };
    auto receive = [&](const Action& a) {
      if (a.op == Op::F && stage(a) > 0) out[r].push_back({Op::RecvF, a.mb, a.chunk});
      if (backward(a) && stage(a) < last) out[r].push_back({Op::RecvB, a.mb, a.chunk});
    };
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      // NOTE [Overlapped pairs]: the second action's receive is posted before the first's.
      if (a.paired && i + 1 < list.size()) receive(list[i + 1]);
      if (i == 0 || !list[i - 1].paired) receive(a);
      out[r].push_back(a);
      if (a.op == Op::F && stage(a) < last) out[r].push_back({Op::SendF, a.mb, a.chunk});
      if (backward(a) && stage(a) > 0) out[r].push_back({Op::SendB, a.mb, a.chunk});
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
