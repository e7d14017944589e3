#include <iostream>

#include "commands.h"
#include "config_options.h"

namespace loom::cli {

Action add_config(CLI::App& app) {
  auto* cmd = app.add_subcommand("config", "check a config and print the effective one");
  auto config = std::make_shared<ConfigOptions>();
  auto print = std::make_shared<bool>(false);
  config->add_to(*cmd);
  cmd->add_flag("--print", *print, "print the effective config as TOML (every key)");
  return [cmd, config, print](dist::Runtime&) {
    if (!*cmd) return;
    const Config effective = config->load();
    if (*print) std::cout << to_toml(effective);
  };
}

}  // namespace loom::cli
