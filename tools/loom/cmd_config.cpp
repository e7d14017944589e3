#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>

#include "commands.h"
#include "config_options.h"
#include "loom/core/error.h"
#include "loom/plan/run_plan.h"
#include "loom/train/auto_layout.h"
#include "loom/train/trainer.h"

namespace loom::cli {
namespace {

// The effective config as TOML with the model.* keys the kind reads, and any other that is set
// away from its default (so the text reads back to the same config).
std::string kind_toml(const Config& config, const models::ModelKind& kind) {
  const std::vector<std::string_view> keys = kind.model_keys();
  std::map<std::string, std::string> defaults;
  for (const auto& [key, value] : config_values(Config{})) defaults[key] = value;
  std::map<std::string, std::string> values;
  for (const auto& [key, value] : config_values(config)) values[key] = value;
  return to_toml(config, [&](const std::string& key) {
    if (!key.starts_with("model.") || keys.empty() || values[key] != defaults[key]) return true;
    return std::find(keys.begin(), keys.end(), std::string_view(key).substr(6)) != keys.end();
  });
}

}  // namespace

Action add_config(CLI::App& app) {
  auto* cmd = app.add_subcommand("config", "check a config as `loom train` would, and print the effective one");
  auto config = std::make_shared<ConfigOptions>();
  auto print = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto ranks = std::make_shared<int>(0);
  config->add_to(*cmd);
  cmd->add_flag("--check")->description("run every check `loom train` runs (data, layout, schedule, memory) and exit 2 on the "
                           "first failure; `loom config` always does");
  cmd->add_flag("--print", *print, "print the effective config as TOML (every key) and the run plan derived from "
                                   "it (per stage: layers, memory by category; per axis: bytes per step), after "
                                   "the checks");
  cmd->add_flag("--json", *json, "print the run plan as JSON (after the checks)");
  cmd->add_option("--ranks", *ranks, "check the layout against this many ranks on this machine (default: the "
                                     "product of the config's degrees)");
  return [cmd, config, print, json, ranks](dist::Runtime& runtime) {
    if (!*cmd) return;
    Config effective = config->load();
    const auto& p = effective.parallel;
    const int64_t layout = p.dp * p.tp * p.pp * p.sp;
    LOOM_CHECK_INPUT(*ranks >= 0, "--ranks {} must be positive", *ranks);
    const int world = *ranks > 0 ? *ranks : static_cast<int>(layout);  // validate() keeps it within an int
    // parallel.auto: what `loom train` runs is the chosen layout, so that is what is checked and
    // printed (planned here without measuring; train::preview_layout says on what).
    train::AutoLayout chosen;
    if (effective.parallel.auto_layout) {
      chosen = train::preview_layout(effective, world,
                                     train::local_cluster_cache(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")));
      effective = chosen.config;
    }
    const plan::RunPlan plan =
        train::Trainer::check(effective, world, world, "", models::ModelKinds::builtin(), runtime.device_backend());
    for (const std::string& warning : config_warnings(effective)) std::cerr << "loom: warning: " << warning << '\n';
    (*json || *print ? std::cerr : std::cout) << chosen.report;  // stdout stays JSON or TOML
    if (*json) {
      std::cout << plan.to_json().dump(2) << '\n';
    } else if (*print) {
      std::cout << kind_toml(effective, models::ModelKinds::builtin().find(effective.model.kind)) << '\n' << plan.describe();
    } else
      std::cout << fmt::format("loom: config ok for {} rank{}\n", world, world == 1 ? "" : "s");
  };
}

}  // namespace loom::cli
