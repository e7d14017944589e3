#include "config_options.h"

namespace loom::cli {

void ConfigOptions::add_to(CLI::App& command) {
  command.add_option("--config,-c", path, "TOML config file (configs/ has examples); defaults if omitted");
  command.add_option("--set", overrides, "override one key: --set section.key=value (repeatable)")
      ->allow_extra_args(false);
}

Config ConfigOptions::load() const {
  Config config = path.empty() ? Config{} : load_config_file(path);
  for (const auto& assignment : overrides) apply_override(config, assignment);
  validate(config);
  return config;
}

}  // namespace loom::cli
