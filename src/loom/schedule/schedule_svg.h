#pragma once
// A schedule's timeline as a picture (`loom schedule --svg`), drawn as the pipeline papers draw
// them: one row per pipeline rank, time across, each action a box from its simulated start to its
// end, coloured by what it computes (F blue, B green, W orange, BW teal, R grey; a later chunk of
// an interleaved schedule a lighter shade of the same colour), its micro-batch number inside. The
// idle time (the bubbles) stays empty. The title names the kind, stages, micro-batches, chunks and
// the bubble fraction.
#include <string>
#include <vector>

#include "loom/schedule/simulator.h"

namespace loom::schedule {

// Where one simulated action is drawn, in pixels.
struct ScheduleBox {
  int64_t rank = 0;
  Action action;
  double x = 0, y = 0, width = 0, height = 0;
};

// The picture's geometry: x = plot_left + start x time_scale for every action of sim, so widths
// are proportional to durations and a rank's boxes never overlap; row r spans
// [row_top(r), row_top(r) + row_height).
struct ScheduleLayout {
  double width = 0, height = 0;
  double plot_left = 0, plot_top = 0, plot_width = 0;
  double row_height = 0, row_gap = 0;
  double time_scale = 0;  // pixels per unit of simulated time
  std::vector<ScheduleBox> boxes;  // rank by rank, each in its execution order
  double row_top(int64_t rank) const { return plot_top + static_cast<double>(rank) * (row_height + row_gap); }
};

ScheduleLayout layout_schedule(const Schedule& schedule, const Simulation& sim);

// The fill colour of an action ("#rrggbb"): its op's colour, lightened for later chunks.
std::string action_colour(Op op, int64_t chunk, int64_t chunks);

// The whole picture as an SVG document.
std::string schedule_svg(const Schedule& schedule, const Simulation& sim);

}  // namespace loom::schedule
