#include "config_options.h"

#include "loom/data/token_sidecar.h"
#include "loom/models/registry.h"

namespace loom::cli {

void ConfigOptions::add_to(CLI::App& command) {
  command.add_option("--config,-c", path, "TOML config file (configs/ has examples); defaults if omitted");
  command.add_option("--set", overrides, "override one key: --set section.key=value (repeatable)")
      ->allow_extra_args(false);
}

Config ConfigOptions::load() const {
  Config config = path.empty() ? Config{} : load_config_file(path);
  for (const auto& assignment : overrides) apply_override(config, assignment);
  models::validate_config(config);
  return config;
}

std::vector<PathUse> ConfigOptions::inputs(const Config& config) const {
  std::vector<PathUse> files;
  if (!path.empty()) files.push_back({path, "the config file"});
  const std::string& source = config.data.source;
  if (const size_t colon = source.find(':'); colon != std::string::npos) {
    const std::string data = source.substr(colon + 1);
    files.push_back({data, "the data file (data.source)"});
    files.push_back({data::sidecar_path(data), "the data file's sidecar"});
  }
  if (config.parallel.schedule.starts_with("csv:"))
    files.push_back({config.parallel.schedule.substr(4), "the schedule (parallel.schedule)"});
  return files;
}

}  // namespace loom::cli
