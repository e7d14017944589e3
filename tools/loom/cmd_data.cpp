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

// Prints what `loom data prepare` wrote, and the settings that train on it.
void print_prepared(const data::PreparedTokens& done, const std::string& out) {
  const data::TokenSidecar& t = done.train;
  std::cout << fmt::format("wrote {} tokens ({} tokenizer, vocab {}, {}) to {}\n", t.tokens, t.tokenizer, t.vocab,
                           t.dtype, out);
  if (done.valid)
    std::cout << fmt::format("wrote {} validation tokens (whole documents) to {}\n", done.valid->tokens,
                             done.valid_path);
  for (const std::string& path : done.written)
    if (path != out && path != done.valid_path) std::cout << fmt::format("wrote {}\n", path);
  std::string settings = "--set data.source=" + shell_quoted("tokens:" + out);
  if (done.valid) settings += " --set data.valid=" + shell_quoted("tokens:" + done.valid_path);
  std::cout << fmt::format("train with {} --set model.vocab=auto\n", settings);
}

}  // namespace

Action add_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "data preparation");
  cmd->require_subcommand(1);
  auto* prepare = cmd->add_subcommand(
      "prepare", "write text files as a token file (byte level, or a SentencePiece bpe or unigram tokenizer trained "
                 "on them or given), with beside it OUT.json describing the ids and the tokenizer model");
  auto o = std::make_shared<data::PrepareOptions>();
  auto texts = std::make_shared<std::vector<std::string>>();
  auto fraction = std::make_shared<double>(0);
  prepare->add_option("--text", *texts, "input text files (UTF-8); each file, and each paragraph in one, is a "
                                        "document")->required();
  prepare->add_option("--tokenizer", o->tokenizer, "byte (default) | bpe | unigram (trained on the texts) | a "
                                                   "SentencePiece .model file to reuse");
  prepare->add_option("--vocab", o->vocab, "pieces of a trained tokenizer (default 8000)");
  auto* valid = prepare->add_option("--valid-fraction", *fraction, "also write OUT with .valid before its extension: "
                                                                  "about this share of the tokens, in whole documents");
  prepare->add_option("--dtype", o->dtype, "uint16 | uint32 | auto (default: uint16 when the vocabulary fits)");
  prepare->add_option("--out", o->out.path, "output token file (flat little-endian ids); its sidecar is OUT.json")
      ->required();
  // A clicks file (the data.source = "clicks:PATH" format) of the config's DLRM synthetic clicks.
  auto* clicks = cmd->add_subcommand("clicks", "write a DLRM config's synthetic clicks as a clicks file");
  auto config = std::make_shared<ConfigOptions>();
  auto samples = std::make_shared<int64_t>(0);
  auto clicks_out = std::make_shared<std::string>();
  config->add_to(*clicks);
  clicks->add_option("--samples", *samples, "samples to write")->required();
  clicks->add_option("--out", *clicks_out, "output clicks file")->required();
  return [prepare, o, texts, fraction, valid, clicks, config, samples, clicks_out](dist::Runtime&) {
    if (*clicks) {
      write_clicks_file(*config, *samples, *clicks_out);
      return;
    }
    if (!*prepare) return;
    for (const std::string& text : *texts) o->texts.push_back({text, "--text"});
    if (*valid) o->valid_fraction = *fraction;
    print_prepared(data::prepare_tokens(*o), o->out.path);
  };
}

}  // namespace loom::cli
