#include <iostream>

#include "commands.h"
#include "loom/core/error.h"
#include "config_options.h"
#include "loom/data/clicks.h"
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
  // A clicks file (the data.source = "clicks:PATH" format) of the config's DLRM synthetic clicks.
  auto* clicks = cmd->add_subcommand("clicks", "write a DLRM config's synthetic clicks as a clicks file");
  auto config = std::make_shared<ConfigOptions>();
  auto samples = std::make_shared<int64_t>(0);
  auto clicks_out = std::make_shared<std::string>();
  config->add_to(*clicks);
  clicks->add_option("--samples", *samples, "samples to write")->required();
  clicks->add_option("--out", *clicks_out, "output clicks file")->required();
  return [prepare, o, clicks, config, samples, clicks_out](dist::Runtime&) {
    if (*clicks) {
      const Config c = config->load();
      LOOM_CHECK_INPUT(c.model.kind == "dlrm", "loom data clicks needs model.kind = \"dlrm\" (got \"{}\")", c.model.kind);
      LOOM_CHECK_INPUT(*samples > 0, "--samples {} must be positive", *samples);
      const data::ClickSource source(c.model, c.data.zipf, static_cast<uint64_t>(c.train.seed));
      data::write_clicks(source, *samples, *clicks_out);
      std::cout << fmt::format("wrote {} samples to {}; train with --set data.source=clicks:{}\n", *samples,
                               *clicks_out, *clicks_out);
      return;
    }
    if (!*prepare) return;
    LOOM_CHECK_INPUT(o->dtype == "uint16" || o->dtype == "uint32", "--dtype {} is not uint16 or uint32", o->dtype);
    const int64_t n = data::write_byte_tokens(o->text, o->out, o->dtype == "uint16" ? 2 : 4);
    std::cout << fmt::format("wrote {} tokens ({}) to {}; train with --set data.source=tokens:{} "
                             "--set data.token_dtype={}\n",
                             n, o->dtype, o->out, o->out, o->dtype);
  };
}

}  // namespace loom::cli
