// loom plot: the loss curves (and validation loss, and throughput) of one or several runs'
// metrics files as one SVG picture (trace/loss_plot.h, docs/pictures.md).
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/trace/loss_plot.h"

namespace loom::cli {

Action add_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "draw the loss (and val_loss, and tokens/s) of runs' metrics files as SVG");
  struct Options {
    std::vector<std::string> metrics, labels;
    std::string out, title;
    bool log_y = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("metrics", o->metrics, "metrics files written by loom train --metrics (JSON Lines)")->required();
  cmd->add_option("--out", o->out, "the SVG file to write")->required();
  cmd->add_option("--label", o->labels, "a run's name in the legend, one per metrics file in order (default: the "
                                        "file names); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--title", o->title, "the picture's title");
  cmd->add_flag("--log-y", o->log_y, "draw the loss on a log scale");
  return [cmd, o](dist::Runtime&) {
    if (!*cmd) return;
    LOOM_CHECK_INPUT(o->labels.empty() || o->labels.size() == o->metrics.size(),
                     "{} --label for {} metrics files; hint: give one per file, in the same order, or none",
                     o->labels.size(), o->metrics.size());
    std::vector<PathUse> inputs;
    for (const std::string& path : o->metrics) inputs.push_back({path, "metrics file"});
    check_output_paths(inputs, {{o->out, "--out"}});
    std::vector<trace::MetricsRun> runs;
    for (size_t i = 0; i < o->metrics.size(); ++i)
      runs.push_back(trace::read_metrics(o->metrics[i], o->labels.empty() ? o->metrics[i] : o->labels[i]));
    const std::string picture = trace::loss_plot_svg(runs, {.title = o->title, .log_y = o->log_y});
    OutputFile out(o->out);
    out.write(picture);
    out.commit();
    size_t steps = 0;
    for (const trace::MetricsRun& run : runs) steps += run.loss.size();
    std::cout << fmt::format("wrote {} ({} run{}, {} steps)\n", o->out, runs.size(), runs.size() == 1 ? "" : "s",
                             steps);
  };
}

}  // namespace loom::cli
