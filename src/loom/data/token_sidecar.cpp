#include "loom/data/token_sidecar.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/json_integer.h"

namespace loom::data {

namespace {
constexpr const char* kFormat = "loom-tokens";
}  // namespace

std::string sidecar_path(const std::string& token_path) { return token_path + ".json"; }

std::string to_json(const TokenSidecar& s) {
  // ordered_json keeps the documented field order, so the file reads like the docs.
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const SourceText& t : s.sources) sources.push_back({{"path", t.path}, {"checksum", t.checksum}});
  const nlohmann::ordered_json j = {{"format", kFormat},
                                    {"version", s.version},
                                    {"dtype", s.dtype},
                                    {"vocab", s.vocab},
                                    {"tokens", s.tokens},
                                    {"source", s.source},
                                    {"source_checksum", s.source_checksum},
                                    {"tokenizer", s.tokenizer},
                                    {"tokenizer_model", s.tokenizer_model},
                                    {"tokenizer_checksum", s.tokenizer_checksum},
                                    {"sources", sources}};
  return j.dump(2) + "\n";
}

TokenSidecar parse_sidecar(const std::string& text, const std::string& path) {
  const std::string hint = "hint: prepare the token file again with `loom data prepare`, or remove the sidecar and "
                           "set data.token_dtype";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  TokenSidecar s;
  try {
    LOOM_CHECK_INPUT(j.is_object() && j.contains("format") && j["format"] == kFormat,
                     "token sidecar '{}' is not a \"{}\" JSON object; {}", path, kFormat, hint);
    s.version = json_integer<int>(j.at("version"));  // NOTE [Integers in JSON]
    LOOM_CHECK_INPUT(s.version <= TokenSidecar::kVersion,
                     "token sidecar '{}' is version {}, newer than the version {} this loom reads; hint: use a newer "
                     "loom, or prepare the file again with this one",
                     path, s.version, TokenSidecar::kVersion);
    s.dtype = j.at("dtype").get<std::string>();
    s.vocab = json_integer(j.at("vocab"));
    s.tokens = json_integer(j.at("tokens"));
    s.source = j.value("source", "");
    s.source_checksum = j.value("source_checksum", "");
    // Absent in the first sidecars, which were all byte level (NOTE [Token sidecar]).
    s.tokenizer = j.value("tokenizer", "byte");
    s.tokenizer_model = j.value("tokenizer_model", "");
    s.tokenizer_checksum = j.value("tokenizer_checksum", "");
    for (const auto& t : j.value("sources", nlohmann::json::array()))
      s.sources.push_back({t.at("path").get<std::string>(), t.at("checksum").get<std::string>()});
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("token sidecar '{}' lacks a field or has one of the wrong type ({}); {}", path,
                                 e.what(), hint));
  }
  LOOM_CHECK_INPUT(s.version >= 1 && (s.dtype == "uint16" || s.dtype == "uint32") && s.tokens >= 0 && s.vocab > 0,
                   "token sidecar '{}' says version {}, dtype \"{}\", {} tokens, vocab {}: not a valid token file "
                   "description; {}",
                   path, s.version, s.dtype, s.tokens, s.vocab, hint);
  const bool byte = s.tokenizer == "byte";
  LOOM_CHECK_INPUT(byte || s.tokenizer == "bpe" || s.tokenizer == "unigram" || s.tokenizer == "byte-bpe",
                   "token sidecar '{}' names tokenizer \"{}\", not \"byte\", \"bpe\", \"unigram\" or \"byte-bpe\"; {}", path,
                   s.tokenizer, hint);
  LOOM_CHECK_INPUT(byte == s.tokenizer_model.empty(),
                   "token sidecar '{}' says tokenizer \"{}\" with tokenizer_model \"{}\": a {} tokenizer {} a model "
                   "file; {}",
                   path, s.tokenizer, s.tokenizer_model, s.tokenizer, byte ? "has no" : "needs", hint);
  return s;
}

std::optional<TokenSidecar> read_sidecar(const std::string& token_path) {
  const std::string path = sidecar_path(token_path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  LOOM_CHECK_INPUT(S_ISREG(st.st_mode), "token sidecar '{}' is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK_INPUT(in.good(), "cannot read token sidecar '{}'", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_sidecar(text, path);
}

std::string tokenizer_model_path(const std::string& token_path, const TokenSidecar& sidecar) {
  if (sidecar.tokenizer_model.empty()) return "";
  return (std::filesystem::path(sidecar_path(token_path)).parent_path() / sidecar.tokenizer_model).string();
}

void Fnv1a::update(std::string_view bytes) {
  for (const unsigned char c : bytes) {
    hash_ ^= c;
    hash_ *= 0x100000001b3ULL;
  }
}

}  // namespace loom::data
