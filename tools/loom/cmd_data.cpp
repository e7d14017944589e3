#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "loom/data/token_file.h"

namespace loom::cli {

Action add_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "data preparation");
  cmd->require_subcommand(1);
  auto* prepare = cmd->add_subcommand("prepare", "write a text file as a byte-level token file");
  struct Options {
    std::string text, out, dtype = "uint16";
  };
  auto o = std::make_shared<Options>();
  prepare->add_option("--text", o->text, "input text file")->required();
  prepare->add_option("--out", o->out, "output token file (flat little-endian ids)")->required();
  prepare->add_option("--dtype", o->dtype, "uint16 | uint32");
  return [prepare, o](dist::Runtime&) {
    if (!*prepare) return;
    LOOM_CHECK_INPUT(o->dtype == "uint16" || o->dtype == "uint32", "--dtype {} is not uint16 or uint32", o->dtype);
    const int64_t n = data::write_byte_tokens(o->text, o->out, o->dtype == "uint16" ? 2 : 4);
    std::cout << fmt::format("wrote {} tokens ({}) to {}; train with --set data.source=tokens:{} "
                             "--set data.token_dtype={}\n",
                             n, o->dtype, o->out, o->out, o->dtype);
  };
}

}  // namespace loom::cli
