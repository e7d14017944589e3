#include "loom/schedule/schedule_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/core/svg.h"

namespace loom::schedule {
namespace {

constexpr double kMargin = 16, kRowHeight = 28, kRowGap = 6, kPlotTop = 64;
// The shortest action is drawn this wide when the picture's width allows, so that a two-digit
// micro-batch number fits inside it; the plot is then stretched or squeezed into these bounds.
constexpr double kShortestBox = 28, kMinPlotWidth = 480, kMaxPlotWidth = 2400;
constexpr double kFont = 12, kTitleFont = 16;

struct OpStyle {
  Op op;
  const char* colour;
  const char* legend;
};
constexpr OpStyle kOpStyles[] = {{Op::F, "#4c78a8", "F forward"},
                                 {Op::B, "#59a14f", "B input gradient"},
                                 {Op::W, "#f1a33b", "W weight gradient"},
                                 {Op::BW, "#2f8c7b", "BW backward (B + W)"},
                                 {Op::R, "#9d9d9d", "R recompute"}};

const OpStyle& style_of(Op op) {
  for (const OpStyle& s : kOpStyles)
    if (s.op == op) return s;
  return kOpStyles[0];  // messages are not drawn
}

struct Rgb {
  double r, g, b;
};

Rgb parse_rgb(const char* hex) {
  const unsigned v = std::stoul(std::string(hex + 1), nullptr, 16);
  return {static_cast<double>((v >> 16) & 0xff), static_cast<double>((v >> 8) & 0xff), static_cast<double>(v & 0xff)};
}

// Dark text on a light box, white on a dark one.
const char* text_colour(const std::string& fill) {
  const Rgb c = parse_rgb(fill.c_str());
  return (0.299 * c.r + 0.587 * c.g + 0.114 * c.b) / 255 > 0.6 ? "#222222" : "white";
}

double plot_width_for(const Simulation& sim) {
  double shortest = 0;
  for (const auto& list : sim.ranks)
    for (const TimedAction& t : list)
      if (t.end > t.start && (shortest == 0 || t.end - t.start < shortest)) shortest = t.end - t.start;
  if (shortest == 0) return kMinPlotWidth;
  return std::clamp(sim.makespan / shortest * kShortestBox, kMinPlotWidth, kMaxPlotWidth);
}

std::string title_of(const Schedule& s, const Simulation& sim) {
  return fmt::format("{}: {} stages, {} micro-batches{}, bubble fraction {:.1f}%", s.kind, s.stages, s.microbatches,
                     s.chunks > 1 ? fmt::format(", {} chunks per rank", s.chunks) : "", 100 * sim.bubble_fraction);
}

std::string subtitle_of(const Simulation& sim) {
  return fmt::format("each box an action at its simulated time, numbered by micro-batch; makespan {:g}", sim.makespan);
}

void draw_rows(svg::Document& doc, const ScheduleLayout& l, int64_t stages) {
  for (int64_t r = 0; r < stages; ++r) {
    const double top = l.row_top(r);
    doc.element("rect", {{"x", l.plot_left}, {"y", top}, {"width", l.plot_width}, {"height", l.row_height},
                         {"fill", "#f2f2f2"}, {"stroke", "#d0d0d0"}, {"stroke-width", 0.5}});
    doc.element("text", {{"x", l.plot_left - 8}, {"y", top + l.row_height / 2 + kFont * 0.35}, {"font-size", kFont},
                         {"text-anchor", "end"}, {"fill", "#333333"}},
                fmt::format("rank {}", r));
  }
}

void draw_boxes(svg::Document& doc, const ScheduleLayout& l, int64_t chunks) {
  for (const ScheduleBox& b : l.boxes) {
    const std::string fill = action_colour(b.action.op, b.action.chunk, chunks);
    doc.element("rect", {{"x", b.x}, {"y", b.y}, {"width", b.width}, {"height", b.height}, {"fill", fill},
                         {"stroke", "white"}, {"stroke-width", b.width >= 4 ? 1.0 : 0.0}});
    const std::string label = fmt::format("{}", b.action.mb);
    if (b.width < svg::text_width(label, kFont) + 4) continue;  // too narrow: the colour alone
    doc.element("text", {{"x", b.x + b.width / 2}, {"y", b.y + b.height / 2 + kFont * 0.35}, {"font-size", kFont},
                         {"text-anchor", "middle"}, {"fill", text_colour(fill)}},
                label);
  }
}

// The time axis under the rows; returns the y below it.
double draw_time_axis(svg::Document& doc, const ScheduleLayout& l, double makespan, double y) {
  doc.element("line", {{"x1", l.plot_left}, {"y1", y}, {"x2", l.plot_left + l.plot_width}, {"y2", y},
                       {"stroke", "#555555"}});
  for (double t : svg::nice_ticks(0, makespan, std::max(2, static_cast<int>(l.plot_width / 80)))) {
    if (t > makespan * (1 + 1e-9)) break;
    const double x = l.plot_left + t * l.time_scale;
    doc.element("line", {{"x1", x}, {"y1", y}, {"x2", x}, {"y2", y + 5}, {"stroke", "#555555"}});
    doc.element("text", {{"x", x}, {"y", y + 18}, {"font-size", kFont - 1}, {"text-anchor", "middle"},
                         {"fill", "#333333"}},
                svg::tick_label(t));
  }
  doc.element("text", {{"x", l.plot_left + l.plot_width / 2}, {"y", y + 36}, {"font-size", kFont},
                       {"text-anchor", "middle"}, {"fill", "#333333"}},
              "time (simulated)");
  return y + 44;
}

struct LegendItem {
  std::string fill, label;
};

std::vector<LegendItem> legend_items(const Schedule& s) {
  std::vector<LegendItem> items;
  for (const OpStyle& style : kOpStyles) {
    const bool used = std::any_of(s.ranks.begin(), s.ranks.end(), [&](const std::vector<Action>& list) {
      return std::any_of(list.begin(), list.end(), [&](const Action& a) { return a.op == style.op; });
    });
    if (used) items.push_back({action_colour(style.op, 0, 1), style.legend});
  }
  constexpr int64_t kMaxChunkItems = 8;
  for (int64_t c = 0; s.chunks > 1 && c < std::min(s.chunks, kMaxChunkItems); ++c)
    items.push_back({action_colour(Op::F, c, s.chunks), fmt::format("chunk {}", c)});
  items.push_back({"#f2f2f2", "idle (bubble)"});
  return items;
}

struct PlacedItem {
  LegendItem item;
  double x, y;
};

// Items flow left to right from (left, top) and wrap at `width`.
std::vector<PlacedItem> place_legend(const std::vector<LegendItem>& items, double left, double top, double width) {
  std::vector<PlacedItem> placed;
  double x = left, y = top;
  for (const LegendItem& item : items) {
    const double w = 14 + 6 + svg::text_width(item.label, kFont) + 18;
    if (x > left && x + w > left + width) x = left, y += 22;
    placed.push_back({item, x, y});
    x += w;
  }
  return placed;
}

double legend_height(const Schedule& s, double width) {
  const std::vector<PlacedItem> placed = place_legend(legend_items(s), 0, 0, width);
  return placed.empty() ? 0 : placed.back().y + 22;
}

void draw_legend(svg::Document& doc, const std::vector<PlacedItem>& placed) {
  for (const PlacedItem& p : placed) {
    doc.element("rect", {{"x", p.x}, {"y", p.y}, {"width", 14}, {"height", 14}, {"fill", p.item.fill},
                         {"stroke", "#999999"}, {"stroke-width", 0.5}});
    doc.element("text", {{"x", p.x + 20}, {"y", p.y + 11.5}, {"font-size", kFont}, {"fill", "#333333"}}, p.item.label);
  }
}

}  // namespace

std::string action_colour(Op op, int64_t chunk, int64_t chunks) {
  const Rgb base = parse_rgb(style_of(op).colour);
  // Chunk 0 in the full colour, the last chunk half way to white.
  const double t = chunks > 1 ? 0.5 * static_cast<double>(chunk) / static_cast<double>(chunks - 1) : 0;
  const auto mix = [t](double v) { return static_cast<int>(std::lround(v + (255 - v) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(base.r), mix(base.g), mix(base.b));
}

ScheduleLayout layout_schedule(const Schedule& s, const Simulation& sim) {
  ScheduleLayout l;
  l.plot_left = kMargin + svg::text_width(fmt::format("rank {}", s.stages - 1), kFont) + 8;
  l.plot_top = kPlotTop;
  l.row_height = kRowHeight, l.row_gap = kRowGap;
  const double heading =
      std::max(svg::text_width(title_of(s, sim), kTitleFont), svg::text_width(subtitle_of(sim), kFont));
  l.plot_width = std::max(plot_width_for(sim), heading - l.plot_left);
  l.time_scale = sim.makespan > 0 ? l.plot_width / sim.makespan : 1;
  for (size_t r = 0; r < sim.ranks.size(); ++r)
    for (const TimedAction& t : sim.ranks[r])
      l.boxes.push_back({.rank = t.rank, .action = t.action, .x = l.plot_left + t.start * l.time_scale,
                         .y = l.row_top(static_cast<int64_t>(r)), .width = (t.end - t.start) * l.time_scale,
                         .height = l.row_height});
  l.width = l.plot_left + l.plot_width + 2 * kMargin;
  const double axis_bottom = l.row_top(s.stages) - l.row_gap + 4 + 44;
  l.height = axis_bottom + 12 + legend_height(s, l.plot_width) + kMargin;
  return l;
}

std::string schedule_svg(const Schedule& s, const Simulation& sim) {
  const ScheduleLayout l = layout_schedule(s, sim);
  svg::Document doc(l.width, l.height);
  doc.element("text", {{"x", kMargin}, {"y", 28}, {"font-size", kTitleFont}, {"font-weight", "bold"},
                       {"fill", "#222222"}},
              title_of(s, sim));
  doc.element("text", {{"x", kMargin}, {"y", 48}, {"font-size", kFont}, {"fill", "#555555"}},
              subtitle_of(sim));
  draw_rows(doc, l, s.stages);
  draw_boxes(doc, l, s.chunks);
  const double below_axis = draw_time_axis(doc, l, sim.makespan, l.row_top(s.stages) - l.row_gap + 4);
  draw_legend(doc, place_legend(legend_items(s), l.plot_left, below_axis + 12, l.plot_width));
  return doc.finish();
}

}  // namespace loom::schedule
