#include <nlohmann/json.hpp>

#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/plan/planner.h"
#include "loom/trace/chrome_trace.h"

namespace loom::cli {
namespace {

// The predicted timeline in the format of a real run's --trace: one process per pipeline stage
// (named by its first world rank), compute and gradient-reduction tracks.
void write_trace(const plan::StepPrediction& p, const std::string& path) {
  const auto& par = p.plan.config.parallel;
  const int ranks = static_cast<int>(par.dp * par.tp * par.pp * par.sp);
  std::string events;
  const std::vector<plan::Span> spans = plan::timeline(p);
  for (int64_t stage = 0; stage < par.pp; ++stage) {
    trace::ChromeTrace trace(static_cast<int>(stage * par.sp * par.tp));
    for (const plan::Span& s : spans)
      if (s.rank == stage)
        trace.add_at(s.name, s.track == "gradients" ? "gradients" : "pipeline", s.start, s.end - s.start,
                     s.track == "gradients" ? trace::kGradientTrack : trace::kComputeTrack);
    const std::string text = trace.take_events();
    if (!text.empty()) events += (events.empty() ? "" : ",\n") + text;
  }
  OutputFile file(path);  // a whole file, written then renamed into place (NOTE [Output files])
  file.write(trace::trace_head(ranks));
  if (!events.empty()) file.write(",\n" + events);
  file.write(trace::kTraceEnd);
  file.commit();
}

}  // namespace

// `loom simulate`: one step of the config's layout on a cluster (NOTE [Step simulator]).
Action add_simulate(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "predict one training step of the config's layout on a cluster: step "
                                             "time, tokens/s, MFU, bubble, peak memory per stage");
  auto config = std::make_shared<ConfigOptions>();
  auto cluster = std::make_shared<std::string>();
  auto trace_path = std::make_shared<std::string>();
  auto gpus = std::make_shared<int64_t>(0);
  auto json = std::make_shared<bool>(false);
  config->add_to(*cmd);
  cmd->add_option("--cluster", *cluster, "a cluster name (clusters/NAME.toml) or file")->required();
  cmd->add_option("--gpus", *gpus, "devices the layout runs on (dp x tp x pp x sp)")->required();
  cmd->add_option("--trace", *trace_path, "write the predicted timeline as a Chrome trace (as `loom train --trace`)");
  cmd->add_flag("--json", *json, "print the prediction as one JSON object");
  return [=](dist::Runtime&) {
    if (!*cmd) return;
    const Config loaded = config->load();
    const plan::Cluster spec = plan::read_cluster(*cluster);
    if (!trace_path->empty()) check_output_paths(config->inputs(loaded), {{*trace_path, "--trace"}});
    const plan::StepPrediction prediction = plan::simulate_step(loaded, spec, *gpus);
    if (*json) std::cout << plan::to_json(prediction).dump() << "\n";
    else std::cout << plan::describe(prediction);
    plan::refuse_unfit(prediction);  // printed first: the numbers of every stage
    if (!trace_path->empty()) write_trace(prediction, *trace_path);
  };
}

// `loom plan`: the fastest layouts of a config on a cluster (NOTE [Layout planner]).
Action add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "search layouts (dp, tp, pp, sp, micro-batch, schedule, ZeRO, memory) with "
                                         "the simulator and print the fastest that fit");
  auto config = std::make_shared<ConfigOptions>();
  auto cluster = std::make_shared<std::string>();
  auto out_path = std::make_shared<std::string>();
  auto gpus = std::make_shared<int64_t>(0);
  auto keep = std::make_shared<std::vector<std::string>>();
  auto options = std::make_shared<plan::SearchOptions>();
  config->add_to(*cmd);
  cmd->add_option("--cluster", *cluster, "a cluster name (clusters/NAME.toml) or file")->required();
  cmd->add_option("--gpus", *gpus, "devices to plan for")->required();
  cmd->add_option("--top", options->top, "layouts to list (default 5)");
  cmd->add_option("--keep", *keep, "layout keys to keep as the config has them (dp, tp, pp, sp, sp_mode, "
                                   "micro_batch, schedule, chunks, zero, shard_group, tp_sequence, ep, memory)")
      ->delimiter(',');
  cmd->add_option("--out", *out_path, "write the best layout as a config `loom train -c` accepts");
  return [=](dist::Runtime&) {
    if (!*cmd) return;
    const Config loaded = config->load();
    const plan::Cluster spec = plan::read_cluster(*cluster);
    OutputFile out;
    if (!out_path->empty()) {
      check_output_paths(config->inputs(loaded), {{*out_path, "--out"}});
      out = OutputFile(*out_path);
    }
    LOOM_CHECK_INPUT(options->top >= 1, "--top {} must be at least 1", options->top);
    options->keep = {keep->begin(), keep->end()};
    const plan::PlanResult result = plan::plan_layouts(loaded, spec, *gpus, *options);
    std::cout << plan::describe(result);
    if (out.is_open()) {
      out.write(plan::layout_toml(loaded, result.best.front().plan.config));
      out.commit();
      std::cout << fmt::format("wrote {}\n", *out_path);
    }
  };
}

}  // namespace loom::cli
