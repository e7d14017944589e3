#pragma once
// `loom plot`: the loss curves of one or several runs from their metrics files (`loom train
// --metrics`, JSON Lines, one object per step; trace/metrics_writer.h) as an SVG picture. The
// upper panel draws loss against step, one colour per run, and the validation loss ("val_loss",
// on the steps where a validation pass ran) dashed with markers in the same colour; the lower
// panel draws the throughput (tokens/s, or samples/s for models that count samples) of each run.
// A legend to the right of the panels names the runs.
#include <optional>
#include <string>
#include <vector>

namespace loom::trace {

struct PlotPoint {
  double step = 0, value = 0;
  bool operator==(const PlotPoint&) const = default;
};

// What the plot reads from one metrics file, each series in the file's order of steps.
struct MetricsRun {
  std::string label;
  std::string rate_unit;  // "tokens" or "samples": which *_per_s the file holds ("" when none)
  std::vector<PlotPoint> loss, val_loss, rate;
};

// Reads `path`; `label` names the run in the legend. InputError (exit 2) when the file is missing
// or unreadable, when a line is not a JSON object with a numeric "step" (naming the file and line
// number), or when no line has a numeric "loss". A null value (a non-finite number, as JSON
// writes it) is a missing point.
MetricsRun read_metrics(const std::string& path, const std::string& label);

struct PlotOptions {
  std::string title;   // "" = one from the runs' labels
  bool log_y = false;  // the loss axis logarithmic (every loss and val_loss must be > 0)
};

// One axis: the data's range widened to whole nice ticks (NOTE [Nice ticks]), linear or log.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  // The pixel of `v` when lo is drawn at `from` and hi at `to`.
  double map(double v, double from, double to) const;
};
Axis make_axis(double lo, double hi, bool log, int target_ticks);

// A panel's box in pixels and its axes; y grows downwards, so hi is at the top.
struct Panel {
  double left = 0, top = 0, width = 0, height = 0;
  Axis x, y;
  double px(double step) const { return x.map(step, left, left + width); }
  double py(double value) const { return y.map(value, top + height, top); }
};

struct PlotLayout {
  double width = 0, height = 0;
  Panel loss;
  std::optional<Panel> rate;  // absent when no run reports a throughput
  double legend_left = 0, legend_top = 0;
};

// The geometry of the picture of `runs` (at least one). InputError for --log-y with a loss <= 0.
PlotLayout layout_plot(const std::vector<MetricsRun>& runs, const PlotOptions& options);

// The whole picture as an SVG document.
std::string loss_plot_svg(const std::vector<MetricsRun>& runs, const PlotOptions& options);

}  // namespace loom::trace
