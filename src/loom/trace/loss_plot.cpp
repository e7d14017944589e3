#include "loom/trace/loss_plot.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/core/svg.h"
#include "loom/core/text.h"

namespace loom::trace {
namespace {

using nlohmann::json;

constexpr double kLeft = 76, kTop = 56, kPlotWidth = 680, kLossHeight = 340, kRateHeight = 140;
constexpr double kPanelGap = 48, kBelowAxis = 50, kMargin = 16;
constexpr double kFont = 12, kTitleFont = 16, kLegendRow = 20, kLegendSample = 26, kLegendMaxText = 260;

// A distinct colour per run: the first ten from a palette whose colours are well told apart, then
// hues a golden angle apart (each new one falls in the widest gap left), so no two runs share one.
constexpr const char* kPalette[] = {"#4c78a8", "#f58518", "#e45756", "#54a24b", "#b279a2",
                                    "#72b7b2", "#9d755d", "#eeca3b", "#ff9da6", "#79706e"};

std::string colour_of(size_t run) {
  if (run < std::size(kPalette)) return kPalette[run];
  const double hue = std::fmod(static_cast<double>(run - std::size(kPalette)) * 137.508 + 20, 360.0);
  const int lightness = run % 2 == 0 ? 38 : 52;  // alternate, so neighbouring hues differ in lightness too
  return fmt::format("hsl({:.1f}, 65%, {}%)", hue, lightness);
}

// Appends `record[key]` at `step` when it is a number; null (a non-finite value) is no point.
void add_point(std::vector<PlotPoint>& series, const json& record, const char* key, double step,
               const std::string& path, int64_t line) {
  if (!record.contains(key) || record[key].is_null()) return;
  LOOM_CHECK_INPUT(record[key].is_number(), "{} line {}: \"{}\" is {}, not a number; hint: loom plot reads the "
                   "files of loom train --metrics", path, line, key, record[key].dump());
  series.push_back({step, record[key].get<double>()});
}

void sort_by_step(std::vector<PlotPoint>& series) {
  std::stable_sort(series.begin(), series.end(),
                   [](const PlotPoint& a, const PlotPoint& b) { return a.step < b.step; });
}

std::string units_per_s(const std::vector<MetricsRun>& runs) {
  std::string out;
  for (const char* unit : {"tokens", "samples"})
    if (std::any_of(runs.begin(), runs.end(), [&](const MetricsRun& r) { return r.rate_unit == unit; }))
      out += fmt::format("{}{}/s", out.empty() ? "" : ", ", unit);
  return out;
}

// The range of every point's `field` (step or value) over the chosen series of every run.
template <class Pick>
std::pair<double, double> range_of(const std::vector<MetricsRun>& runs, Pick pick, bool value) {
  double lo = INFINITY, hi = -INFINITY;
  for (const MetricsRun& run : runs)
    for (const std::vector<PlotPoint>* series : pick(run))
      for (const PlotPoint& p : *series) {
        lo = std::min(lo, value ? p.value : p.step);
        hi = std::max(hi, value ? p.value : p.step);
      }
  return {lo, hi};
}

std::vector<const std::vector<PlotPoint>*> all_series(const MetricsRun& r) { return {&r.loss, &r.val_loss, &r.rate}; }
std::vector<const std::vector<PlotPoint>*> loss_series(const MetricsRun& r) { return {&r.loss, &r.val_loss}; }
std::vector<const std::vector<PlotPoint>*> rate_series(const MetricsRun& r) { return {&r.rate}; }

void check_log_scale(const std::vector<MetricsRun>& runs) {
  for (const MetricsRun& run : runs)
    for (const auto* series : loss_series(run))
      for (const PlotPoint& p : *series)
        LOOM_CHECK_INPUT(p.value > 0, "--log-y: run '{}' has a loss of {} at step {:g}, and a log axis needs values "
                         "> 0; hint: drop --log-y", run.label, p.value, p.step);
}

// A legend label no wider than the legend's column: long ones keep their end (a path's file name).
std::string fit_label(const std::string& label) {
  if (svg::text_width(label, kFont) <= kLegendMaxText) return label;
  std::string tail = label;
  while (!tail.empty() && svg::text_width("\xE2\x80\xA6" + tail, kFont) > kLegendMaxText) {
    tail.erase(0, 1);
    while (!tail.empty() && (static_cast<unsigned char>(tail[0]) & 0xC0) == 0x80) tail.erase(0, 1);
  }
  return "\xE2\x80\xA6" + tail;
}

struct LegendEntry {
  std::string label;
  std::string colour;
  bool validation;
};

std::vector<LegendEntry> legend_entries(const std::vector<MetricsRun>& runs) {
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < runs.size(); ++i) {
    entries.push_back({fit_label(runs[i].label), colour_of(i), false});
    if (!runs[i].val_loss.empty()) entries.push_back({fit_label(runs[i].label + " (validation)"), colour_of(i), true});
  }
  return entries;
}

std::string title_of(const std::vector<MetricsRun>& runs, const PlotOptions& options) {
  if (!options.title.empty()) return options.title;
  return runs.size() == 1 ? fmt::format("loss: {}", runs[0].label) : fmt::format("loss of {} runs", runs.size());
}

// The panel's frame, grid and tick labels, and its y axis' name rotated beside the ticks.
void draw_axes(svg::Document& doc, const Panel& p, const std::string& y_name) {
  doc.element("rect", {{"x", p.left}, {"y", p.top}, {"width", p.width}, {"height", p.height}, {"fill", "white"},
                       {"stroke", "#888888"}});
  for (double t : p.y.ticks) {
    const double y = p.py(t);
    doc.element("line", {{"x1", p.left}, {"y1", y}, {"x2", p.left + p.width}, {"y2", y}, {"stroke", "#e6e6e6"}});
    doc.element("text", {{"x", p.left - 6}, {"y", y + kFont * 0.35}, {"font-size", kFont - 1},
                         {"text-anchor", "end"}, {"fill", "#333333"}},
                svg::tick_label(t));
  }
  for (double t : p.x.ticks) {
    const double x = p.px(t);
    doc.element("line", {{"x1", x}, {"y1", p.top}, {"x2", x}, {"y2", p.top + p.height}, {"stroke", "#e6e6e6"}});
    doc.element("text", {{"x", x}, {"y", p.top + p.height + 16}, {"font-size", kFont - 1}, {"text-anchor", "middle"},
                         {"fill", "#333333"}},
                svg::tick_label(t));
  }
  doc.element("rect", {{"x", p.left}, {"y", p.top}, {"width", p.width}, {"height", p.height}, {"fill", "none"},
                       {"stroke", "#888888"}});
  const double x = kMargin + kFont, y = p.top + p.height / 2;
  doc.element("text", {{"x", x}, {"y", y}, {"font-size", kFont}, {"text-anchor", "middle"}, {"fill", "#333333"},
                       {"transform", fmt::format("rotate(-90 {} {})", svg::number(x), svg::number(y))}},
              y_name);
}

void draw_markers(svg::Document& doc, const Panel& p, const std::vector<PlotPoint>& points, const std::string& colour) {
  for (const PlotPoint& q : points)
    doc.element("circle", {{"cx", p.px(q.step)}, {"cy", p.py(q.value)}, {"r", 3}, {"fill", "white"},
                           {"stroke", colour}, {"stroke-width", 1.5}});
}

// A run's series as one line; dashed with markers for validation. A single point is a marker.
void draw_series(svg::Document& doc, const Panel& p, const std::vector<PlotPoint>& points, const std::string& colour,
                 bool validation) {
  if (points.empty()) return;
  std::string xy;
  for (const PlotPoint& q : points) xy += fmt::format("{}{},{}", xy.empty() ? "" : " ", svg::number(p.px(q.step)),
                                                      svg::number(p.py(q.value)));
  std::vector<svg::Attr> attrs{{"points", xy}, {"fill", "none"}, {"stroke", colour}, {"stroke-width", 1.8},
                               {"stroke-linejoin", "round"}};
  if (validation) attrs.emplace_back("stroke-dasharray", "6 4");
  if (points.size() > 1) doc.element("polyline", attrs);
  if (validation || points.size() == 1) draw_markers(doc, p, points, colour);
}

void draw_legend(svg::Document& doc, const PlotLayout& l, const std::vector<LegendEntry>& entries) {
  double y = l.legend_top + kLegendRow / 2;
  for (const LegendEntry& e : entries) {
    const double x = l.legend_left;
    std::vector<svg::Attr> attrs{{"x1", x}, {"y1", y}, {"x2", x + kLegendSample}, {"y2", y}, {"stroke", e.colour},
                                 {"stroke-width", 2.5}};
    if (e.validation) attrs.emplace_back("stroke-dasharray", "6 4");
    doc.element("line", attrs);
    if (e.validation)
      doc.element("circle", {{"cx", x + kLegendSample / 2}, {"cy", y}, {"r", 3}, {"fill", "white"},
                             {"stroke", e.colour}, {"stroke-width", 1.5}});
    doc.element("text", {{"x", x + kLegendSample + 8}, {"y", y + kFont * 0.35}, {"font-size", kFont},
                         {"fill", "#222222"}},
                e.label);
    y += kLegendRow;
  }
}

}  // namespace

MetricsRun read_metrics(const std::string& path, const std::string& label) {
  std::error_code ec;
  LOOM_CHECK_INPUT(std::filesystem::exists(path, ec), "metrics file '{}' does not exist; hint: loom train --metrics "
                   "FILE writes one", path);
  LOOM_CHECK_INPUT(!std::filesystem::is_directory(path, ec), "metrics file '{}' is a directory; hint: give a file "
                   "written by loom train --metrics", path);
  std::ifstream in(path);
  LOOM_CHECK_INPUT(in.good(), "metrics file '{}' cannot be read: {}", path, std::strerror(errno));
  MetricsRun run{.label = label};
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (is_blank(text)) continue;  // a blank line (a trailing one)
    const json record = json::parse(text, nullptr, false);
    if (in.eof() && !record.is_object()) break;  // no newline yet: a record being written (NOTE [Live output files])
    LOOM_CHECK_INPUT(record.is_object(), "{} line {}: not a JSON object; hint: loom plot reads JSON Lines, one "
                     "object per line, as loom train --metrics writes them", path, line);
    LOOM_CHECK_INPUT(record.contains("step") && record["step"].is_number(), "{} line {}: no numeric \"step\"; hint: "
                     "loom plot reads the files of loom train --metrics", path, line);
    const double step = record["step"].get<double>();
    add_point(run.loss, record, "loss", step, path, line);
    add_point(run.val_loss, record, "val_loss", step, path, line);
    for (const char* unit : {"tokens", "samples"}) {
      const std::string key = fmt::format("{}_per_s", unit);
      if (!record.contains(key)) continue;
      run.rate_unit = unit;
      add_point(run.rate, record, key.c_str(), step, path, line);
    }
  }
  LOOM_CHECK_INPUT(!in.bad(), "metrics file '{}': reading failed at line {}", path, line + 1);
  LOOM_CHECK_INPUT(!run.loss.empty(), "{}: none of its {} lines has a numeric \"loss\"; hint: loom plot reads the "
                   "files of loom train --metrics", path, line);
  for (auto* series : {&run.loss, &run.val_loss, &run.rate}) sort_by_step(*series);
  return run;
}

double Axis::map(double v, double from, double to) const {
  const double f = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  return from + f * (to - from);
}

Axis make_axis(double lo, double hi, bool log, int target_ticks) {
  Axis axis{.log = log,
            .ticks = log ? svg::nice_log_ticks(lo, hi, target_ticks) : svg::nice_ticks(lo, hi, target_ticks)};
  axis.lo = axis.ticks.front(), axis.hi = axis.ticks.back();
  return axis;
}

PlotLayout layout_plot(const std::vector<MetricsRun>& runs, const PlotOptions& options) {
  LOOM_CHECK(!runs.empty(), "layout_plot: no runs");
  if (options.log_y) check_log_scale(runs);
  PlotLayout l;
  const auto [step_lo, step_hi] = range_of(runs, all_series, false);
  const Axis x = make_axis(step_lo, step_hi, false, static_cast<int>(kPlotWidth / 90));
  const auto [loss_lo, loss_hi] = range_of(runs, loss_series, true);
  l.loss = {.left = kLeft, .top = kTop, .width = kPlotWidth, .height = kLossHeight, .x = x,
            .y = make_axis(loss_lo, loss_hi, options.log_y, 7)};
  double bottom = l.loss.top + l.loss.height;
  if (std::any_of(runs.begin(), runs.end(), [](const MetricsRun& r) { return !r.rate.empty(); })) {
    // Throughput from zero: the panel shows how far apart the runs are, not only how they vary.
    const double rate_hi = range_of(runs, rate_series, true).second;
    l.rate = Panel{.left = kLeft, .top = bottom + kPanelGap, .width = kPlotWidth, .height = kRateHeight, .x = x,
                   .y = make_axis(0, std::max(rate_hi, 0.0), false, 4)};
    bottom = l.rate->top + l.rate->height;
  }
  l.legend_left = kLeft + kPlotWidth + 24;
  l.legend_top = kTop;
  double legend_width = 0;
  const std::vector<LegendEntry> entries = legend_entries(runs);
  for (const LegendEntry& e : entries) legend_width = std::max(legend_width, svg::text_width(e.label, kFont));
  const double legend_bottom = l.legend_top + static_cast<double>(entries.size()) * kLegendRow;
  l.width = std::max(l.legend_left + kLegendSample + 8 + legend_width + kMargin,
                     kMargin * 2 + svg::text_width(title_of(runs, options), kTitleFont));
  l.height = std::max(bottom + kBelowAxis, legend_bottom + kMargin);
  return l;
}

std::string loss_plot_svg(const std::vector<MetricsRun>& runs, const PlotOptions& options) {
  const PlotLayout l = layout_plot(runs, options);
  svg::Document doc(l.width, l.height);
  doc.element("text", {{"x", kMargin}, {"y", 30}, {"font-size", kTitleFont}, {"font-weight", "bold"},
                       {"fill", "#222222"}},
              title_of(runs, options));
  draw_axes(doc, l.loss, options.log_y ? "loss (log scale)" : "loss");
  for (size_t i = 0; i < runs.size(); ++i) {
    draw_series(doc, l.loss, runs[i].loss, colour_of(i), false);
    draw_series(doc, l.loss, runs[i].val_loss, colour_of(i), true);
  }
  if (l.rate) {
    draw_axes(doc, *l.rate, units_per_s(runs));
    for (size_t i = 0; i < runs.size(); ++i) draw_series(doc, *l.rate, runs[i].rate, colour_of(i), false);
  }
  const Panel& last = l.rate ? *l.rate : l.loss;
  doc.element("text", {{"x", last.left + last.width / 2}, {"y", last.top + last.height + 38}, {"font-size", kFont},
                       {"text-anchor", "middle"}, {"fill", "#333333"}},
              "step");
  draw_legend(doc, l, legend_entries(runs));
  return doc.finish();
}

}  // namespace loom::trace
