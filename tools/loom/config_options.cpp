#include "config_options.h"

#include "loom/data/token_sidecar.h"
#include "loom/data/token_source.h"
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
  data::resolve_vocab(config);  // model.vocab = "auto", and the data's vocabulary checked
  models::validate_config(config);
  return config;
}

std::vector<PathUse> ConfigOptions::inputs(const Config& config) const {
  std::vector<PathUse> files;
  if (!path.empty()) files.push_back({path, "the config file"});
  for (const auto& [source, key] : {std::pair{config.data.source, "data.source"}, {config.data.valid, "data.valid"}}) {
    const size_t colon = source.find(':');
    if (colon == std::string::npos) continue;
    const std::string data = source.substr(colon + 1);
    files.push_back({data, fmt::format("the data file ({})", key)});
    files.push_back({data::sidecar_path(data), fmt::format("the data file's sidecar ({})", key)});
    if (!source.starts_with("tokens:")) continue;
    if (const auto sidecar = data::read_sidecar(data); sidecar && !sidecar->tokenizer_model.empty())
      files.push_back({data::tokenizer_model_path(data, *sidecar), fmt::format("the tokenizer model ({})", key)});
  }
  if (config.parallel.schedule.starts_with("csv:"))
    files.push_back({config.parallel.schedule.substr(4), "the schedule (parallel.schedule)"});
  return files;
}

}  // namespace loom::cli
