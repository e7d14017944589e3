#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/models/registry.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/data/clicks.h"
#include "loom/data/prepare_tokens.h"

namespace loom::cli {

namespace {

// `text` as one shell word: unchanged when it is plain, else in single quotes, so a printed
// command can be pasted whatever the path holds (spaces, $, quotes).
std::string shell_quoted(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                             "0123456789@%+=:,./_-") == std::string::npos;
  if (plain) return text;
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

void write_clicks_file(const ConfigOptions& config, int64_t samples, const std::string& out) {
  const Config c = config.load();
  LOOM_CHECK_INPUT(models::model_kind(c.model.kind).sample_format() == data::SampleFormat::Clicks,
                   "loom data clicks writes click records, and model.kind = \"{}\" reads token sequences; hint: "
                   "model.kind = \"dlrm\", or `loom data prepare` for tokens",
                   c.model.kind);
  LOOM_CHECK_INPUT(samples > 0, "--samples {} must be positive", samples);
  const PathUse target{out, "--out"};
  check_output_paths(config.inputs(c), {target});
  const int64_t record = data::click_record_bytes(c.model);
  int64_t bytes = 0;
  LOOM_CHECK_INPUT(!__builtin_mul_overflow(samples, record, &bytes),
                   "--samples {} of {}-byte records is more bytes than a file can hold (over 2^63); hint: write "
                   "fewer samples",
                   samples, record);
  check_free_space(target, bytes);
  const data::ClickSource source(c.model, c.data.zipf, static_cast<uint64_t>(c.train.seed));
  data::write_clicks(source, samples, out);
  std::cout << fmt::format("wrote {} samples to {}; train with --set data.source={}\n", samples, out,
                           shell_quoted("clicks:" + out));
}

}  // namespace

Action add_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "data preparation");
  cmd->require_subcommand(1);
  auto* prepare = cmd->add_subcommand(
      "prepare", "write a text file as a byte-level token file, and beside it OUT.json stating its token width");
  struct Options {
    std::string text, out, dtype = "uint16";
  };
  auto o = std::make_shared<Options>();
  prepare->add_option("--text", o->text, "input text file")->required();
  prepare->add_option("--out", o->out, "output token file (flat little-endian ids); its sidecar is OUT.json")
      ->required();
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
      write_clicks_file(*config, *samples, *clicks_out);
      return;
    }
    if (!*prepare) return;
    LOOM_CHECK_INPUT(o->dtype == "uint16" || o->dtype == "uint32", "--dtype {} is not uint16 or uint32", o->dtype);
    const data::TokenSidecar meta =
        data::write_byte_tokens({o->text, "--text"}, {o->out, "--out"}, o->dtype == "uint16" ? 2 : 4);
    std::cout << fmt::format("wrote {} tokens ({}) to {} and {}; train with --set data.source={}\n", meta.tokens,
                             meta.dtype, o->out, data::sidecar_path(o->out), shell_quoted("tokens:" + o->out));
  };
}

}  // namespace loom::cli
