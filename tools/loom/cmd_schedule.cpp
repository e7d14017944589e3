// loom schedule: generate (or read) a pipeline schedule, validate it in the unit simulator and
// print its step x rank grid with the bubble fraction, the critical path and each rank's peak of
// stashed micro-batches; --csv writes the schedule, --svg draws its timeline (docs/pictures.md).
#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/schedule/schedule_svg.h"
#include "loom/schedule/simulator.h"

namespace loom::cli {

Action add_schedule(CLI::App& app) {
  auto* cmd = app.add_subcommand("schedule", "print and check a pipeline schedule (no training)");
  struct Options {
    std::string kind = "1f1b", from, csv, svg;
    int64_t stages = 4, microbatches = 8, chunks = 1;
    double f = 1, b = 1, w = 1, recompute = 0, p2p = 0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--kind", o->kind, option_list<ScheduleKind>());
  cmd->add_option("--stages", o->stages, "pipeline stages (ranks)");
  cmd->add_option("--microbatches", o->microbatches, "micro-batches per step");
  cmd->add_option("--chunks", o->chunks, "virtual chunks per rank (interleaved)");
  cmd->add_option("--from", o->from, "read the schedule from this CSV instead of generating it");
  cmd->add_option("--csv", o->csv, "also write the schedule as CSV to this file");
  cmd->add_option("--svg", o->svg, "also draw the simulated timeline (ranks x time) as SVG to this file");
  cmd->add_option("--cost-f", o->f, "duration of a forward");
  cmd->add_option("--cost-b", o->b, "duration of an input gradient (B)");
  cmd->add_option("--cost-w", o->w, "duration of a weight gradient (W); BW takes B + W");
  cmd->add_option("--recompute", o->recompute,
                  "duration of a recomputation on every stage but the last (0 = none): paid inside B unless an R "
                  "action runs it ahead");
  cmd->add_option("--p2p", o->p2p, "latency of a message between stages");
  return [cmd, o](dist::Runtime&) {
    if (!*cmd) return;
    for (auto [name, value] : {std::pair{"--cost-f", o->f}, {"--cost-b", o->b}, {"--cost-w", o->w},
                               {"--recompute", o->recompute}, {"--p2p", o->p2p}})
      LOOM_CHECK_INPUT(value >= 0 && std::isfinite(value), "{} = {} must be finite and >= 0", name, value);
    LOOM_CHECK_INPUT(o->stages <= 1024 && o->microbatches <= 4096 && o->chunks <= 64,
                     "--stages {} / --microbatches {} / --chunks {}: at most 1024 / 4096 / 64 here", o->stages,
                     o->microbatches, o->chunks);
    std::vector<PathUse> outputs;
    if (!o->csv.empty()) outputs.push_back({o->csv, "--csv"});
    if (!o->svg.empty()) outputs.push_back({o->svg, "--svg"});
    check_output_paths({{o->from, "--from"}}, outputs);
    schedule::Schedule schedule;
    if (!o->from.empty()) {
      schedule = schedule::read_csv(o->from);
    } else {
      schedule = schedule::make_schedule(option_from<ScheduleKind>("--kind", o->kind), o->stages, o->microbatches, o->chunks);
    }
    schedule::Costs costs{.p2p = o->p2p};
    for (int64_t v = 0; v < schedule.virtual_stages(); ++v)
      costs.stages.push_back({o->f, o->b, o->w, v + 1 < schedule.virtual_stages() ? o->recompute : 0.0});
    const schedule::Simulation sim = schedule::simulate(schedule, costs);
    // Both temporaries exist before either output is renamed into place: an --svg that cannot be
    // written refuses the run with no --csv written either (NOTE [Output files]).
    OutputFile csv = o->csv.empty() ? OutputFile() : OutputFile(o->csv);
    OutputFile svg = o->svg.empty() ? OutputFile() : OutputFile(o->svg);
    if (csv.is_open()) csv.write(schedule::to_csv(schedule));
    if (svg.is_open()) svg.write(schedule::schedule_svg(schedule, sim));
    for (OutputFile* file : {&csv, &svg})
      if (file->is_open()) file->commit();
    std::cout << fmt::format("schedule {}: {} stages, {} micro-batches, {} chunk(s)\n", schedule.kind, schedule.stages,
                             schedule.microbatches, schedule.chunks)
              << schedule::format_grid(schedule, sim);
    std::string peaks, path;
    for (int64_t n : sim.peak_stashed) peaks += fmt::format(" {}", n);
    for (const auto& t : sim.critical_path) path += fmt::format(" {}@r{}", t.action.text(schedule.chunks > 1), t.rank);
    std::cout << fmt::format("makespan {:g}, bubble fraction {:.4f}\npeak stashed micro-batches per rank:{}\n"
                             "critical path:{}\n",
                             sim.makespan, sim.bubble_fraction, peaks, path);
    // What was written, on stderr: stdout is the report, which a CSV read back reproduces.
    if (!o->csv.empty()) std::cerr << fmt::format("loom: wrote the schedule as CSV to {}\n", o->csv);
    if (!o->svg.empty())
      std::cerr << fmt::format("loom: wrote the simulated timeline as SVG to {} (opens in a browser)\n", o->svg);
  };
}

}  // namespace loom::cli
