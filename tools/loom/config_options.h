#pragma once
// `--config FILE` and repeated `--set section.key=value`, shared by the subcommands that take a
// configuration.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/core/output_file.h"

namespace loom::cli {

struct ConfigOptions {
  std::string path;
  std::vector<std::string> overrides;

  void add_to(CLI::App& command);
  // Defaults, then the file, then the overrides in order; model.vocab = "auto" resolved from the
  // data (data::resolve_vocab); validated.
  Config load() const;
  // The files a run of `config` reads: the config file, the data files of data.source and
  // data.valid (with their sidecars and tokenizer models), a CSV schedule. Outputs are checked
  // against them (NOTE [Output files]).
  std::vector<PathUse> inputs(const Config& config) const;
};

}  // namespace loom::cli
