#include "loom/data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/ranges.h>

#include "loom/core/install_dirs.h"
#include "loom/core/error.h"
#include "loom/data/byte_bpe.h"
#include "loom/data/sentencepiece_module.h"
#include "loom/data/text_corpus.h"
#include "loom/data/token_sidecar.h"

namespace loom::data {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "byte"; }
  int64_t vocab() const override { return 256; }
  std::vector<int64_t> encode(std::string_view text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      LOOM_CHECK(ids[i] >= 0 && ids[i] < 256, "byte tokenizer: id {} is outside its vocabulary of 256", ids[i]);
      text[i] = static_cast<char>(ids[i]);
    }
    return text;
  }
};

// What loom needs of a model file that the processor does not say: its model type and whether it
// prefixes a space. Read from the serialized ModelProto (whose generated header is not installed):
// trainer_spec = field 2 holds model_type = field 3 (1 unigram, 2 bpe, 3 word, 4 char);
// normalizer_spec = field 3 holds add_dummy_prefix = field 3 (true when absent).
struct ModelFacts {
  uint64_t model_type = 1;
  bool add_dummy_prefix = true;
};

class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return at_ >= bytes_.size(); }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; at_ < bytes_.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(bytes_[at_++]);
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return value;
    }
    at_ = bytes_.size();  // malformed: stop
    return value;
  }
  // Reads one field: its number, and its varint value or its length-delimited bytes.
  bool next(uint64_t& field, uint64_t& value, std::string_view& bytes) {
    const uint64_t key = varint();
    field = key >> 3;
    switch (key & 7) {
      case 0: value = varint(); return true;
      case 1: at_ += 8; return at_ <= bytes_.size();
      case 5: at_ += 4; return at_ <= bytes_.size();
      case 2: {
        const uint64_t n = varint();
        if (n > bytes_.size() - at_) return false;
        bytes = bytes_.substr(at_, n);
        at_ += n;
        return true;
      }
      default: return false;
    }
  }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

// The varint field `number` of the message `message`, or `otherwise`.
uint64_t varint_field(std::string_view message, uint64_t number, uint64_t otherwise) {
  WireReader r(message);
  uint64_t field = 0, value = 0;
  std::string_view bytes;
  while (!r.done() && r.next(field, value, bytes))
    if (field == number) otherwise = value;
  return otherwise;
}

ModelFacts model_facts(std::string_view model) {
  ModelFacts facts;
  WireReader r(model);
  uint64_t field = 0, value = 0;
  std::string_view bytes;
  while (!r.done() && r.next(field, value, bytes)) {
    if (field == 2) facts.model_type = varint_field(bytes, 3, facts.model_type);
    if (field == 3) facts.add_dummy_prefix = varint_field(bytes, 3, facts.add_dummy_prefix) != 0;
  }
  return facts;
}

// NOTE [SentencePiece in its own scope]: the module is looked for beside the running executable
// (where the build puts it), beside the library holding this code and in its ../lib (where an
// install puts it: lib/ beside libloom.so, bin/ for the CLI), then where the build put it.
const spm::Api& sentencepiece() {
  static const spm::Api* api = [] {
    if (!sentencepiece_available()) {
      throw Error("SentencePiece tokenizers are not available in a sanitizer build: its runtime refuses the "
                  "module's dlopen(RTLD_DEEPBIND); hint: use the regular build, or --tokenizer byte");
    }
    std::vector<std::string> tried;
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) tried.push_back((exe.parent_path() / "libloom_sentencepiece.so").string());
    if (const std::filesystem::path dir = code_dir(); !dir.empty()) {
      tried.push_back((dir / "libloom_sentencepiece.so").string());
      tried.push_back((dir.parent_path() / "lib" / "libloom_sentencepiece.so").string());
    }
    tried.push_back(LOOM_SENTENCEPIECE_MODULE);
    std::string errors;
    for (const std::string& path : tried) {
      if (!std::filesystem::exists(path, ec)) continue;
      if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
        using Entry = const spm::Api* (*)();
        const auto entry = reinterpret_cast<Entry>(::dlsym(handle, "loom_sentencepiece_api"));
        LOOM_CHECK(entry && entry()->version == spm::Api::kVersion,
                   "'{}' is not the SentencePiece module of this loom; hint: rebuild loom", path);
        return entry();
      }
      errors += fmt::format(" ({})", ::dlerror());
    }
    throw Error(fmt::format("cannot load loom's SentencePiece module, looked for as '{}'{}; hint: build the "
                            "target loom_sentencepiece beside the loom executable",
                            fmt::join(tried, "' and '"), errors));
  }();
  return *api;
}

}  // namespace

bool sentencepiece_available() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  return true;
#endif
}

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& model, const std::string& name);
  std::string kind() const override { return kind_; }
  int64_t vocab() const override { return static_cast<int64_t>(surfaces_.size()); }
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;

 private:
  void encode_piece(std::string_view text, std::vector<int64_t>& ids) const;
  std::unique_ptr<void, void (*)(void*)> processor_{nullptr, [](void*) {}};
  std::string kind_;
  bool dummy_prefix_ = false;
  std::vector<std::string> surfaces_;  // each id's text
  std::vector<int64_t> space_bytes_;   // the byte ids of U+2581, when the model has byte pieces
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model, const std::string& name) {
  const std::string hint = "hint: give a .model file that `loom data prepare --tokenizer bpe` (or unigram) wrote";
  std::string error;
  processor_ = {sentencepiece().load(model, error), sentencepiece().release};
  // SentencePiece's message names its own source lines; only a failure past parsing says more.
  const bool parsed = error.find("ParseFromArray") == std::string::npos;
  LOOM_CHECK_INPUT(processor_ != nullptr, "tokenizer model '{}' is not a SentencePiece model{}; {}", name,
                   parsed ? " (" + error + ")" : std::string(" (it does not parse as one)"), hint);
  const ModelFacts facts = model_facts(model);
  LOOM_CHECK_INPUT(facts.model_type == 1 || facts.model_type == 2,
                   "tokenizer model '{}' is a SentencePiece model of type {} (3 = word, 4 = char); loom reads bpe and "
                   "unigram models; {}",
                   name, facts.model_type, hint);
  kind_ = facts.model_type == 2 ? "bpe" : "unigram";
  dummy_prefix_ = facts.add_dummy_prefix;
  std::vector<std::string> pieces;
  std::vector<spm::PieceKind> kinds;
  sentencepiece().pieces(processor_.get(), pieces, kinds);
  surfaces_.resize(pieces.size());
  std::vector<int64_t> byte_ids(256, -1);
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string& piece = pieces[id];
    std::string& surface = surfaces_[id];
    switch (kinds[id]) {
      case spm::PieceKind::Byte: {  // "<0xAB>"
        const auto byte = static_cast<unsigned char>(std::stoi(piece.substr(3, 2), nullptr, 16));
        surface.assign(1, static_cast<char>(byte));
        byte_ids[byte] = static_cast<int64_t>(id);
        break;
      }
      case spm::PieceKind::Unknown: surface = " \xE2\x81\x87 "; break;  // SentencePiece's default surface
      case spm::PieceKind::Normal:
        for (size_t at = 0; at < piece.size();) {
          const bool space = piece.compare(at, kSpace.size(), kSpace) == 0;
          surface += space ? ' ' : piece[at];
          at += space ? kSpace.size() : 1;
        }
        break;
      default: break;  // control and unused pieces have no text
    }
  }
  for (const char c : kSpace) space_bytes_.push_back(byte_ids[static_cast<unsigned char>(c)]);
  if (std::count(space_bytes_.begin(), space_bytes_.end(), -1) > 0) space_bytes_.clear();
}

void SentencePieceTokenizer::encode_piece(std::string_view text, std::vector<int64_t>& ids) const {
  if (text.empty()) return;
  std::vector<int> piece_ids;
  std::string error;
  LOOM_CHECK(sentencepiece().encode(processor_.get(), text, piece_ids, error),
             "SentencePiece could not encode {} bytes of text: {}", text.size(), error);
  ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
}

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  // SentencePiece writes a space as U+2581 and so decodes a U+2581 of the text as a space; the
  // text's own U+2581 goes as its three byte pieces instead, so every text decodes to itself.
  std::vector<int64_t> ids;
  if (space_bytes_.empty()) {
    encode_piece(text, ids);
    return ids;
  }
  for (size_t at = 0;;) {
    const size_t next = text.find(kSpace, at);
    encode_piece(text.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at), ids);
    if (next == std::string_view::npos) return ids;
    ids.insert(ids.end(), space_bytes_.begin(), space_bytes_.end());
    at = next + kSpace.size();
  }
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  // The surfaces concatenated: a byte piece is its byte, so a growing list's text only grows.
  std::string text;
  for (const int64_t id : ids) {
    LOOM_CHECK(id >= 0 && id < vocab(), "{} tokenizer: id {} is outside its vocabulary of {}", kind_, id, vocab());
    text += surfaces_[static_cast<size_t>(id)];
  }
  // A model that prefixes a space to the text encodes (SentencePiece's default) drops it again.
  if (dummy_prefix_ && !ids.empty() && surfaces_[static_cast<size_t>(ids.front())].starts_with(' ')) text.erase(0, 1);
  return text;
}

// SentencePiece's failure to train, as loom's words: a vocabulary the text cannot fill, or one
// too small for its characters, names the bound SentencePiece states.
InputError training_error(const std::string& kind, int64_t vocab, const std::string& message) {
  std::smatch m;
  if (std::regex_search(message, m, std::regex(R"(set it to a value <= (\d+))")))
    return InputError(fmt::format("--vocab {} is more than the text supports: a {} tokenizer trained on it has at most "
                                  "{} pieces; hint: --vocab {} or less, or give more text",
                                  vocab, kind, m[1].str(), m[1].str()));
  if (std::regex_search(message, m, std::regex(R"(smaller than required_chars\. \d+ vs (\d+))")))
    return InputError(fmt::format("--vocab {} is too small for the text: a {} tokenizer needs a piece for each of its "
                                  "characters and bytes, {} in all; hint: --vocab {} or more",
                                  vocab, kind, m[1].str(), m[1].str()));
  if (message.find("sentences_.empty()") != std::string::npos)
    return InputError(fmt::format("the text has no line to train a {} tokenizer on (only newlines); hint: give text",
                                  kind));
  return InputError(fmt::format("SentencePiece could not train a {} tokenizer of {} pieces on the text: {}", kind,
                                vocab, message));
}

}  // namespace

// NOTE [Trained tokenizers]: `loom data prepare --tokenizer bpe|unigram` trains SentencePiece with
// options that suit any text, and that make text -> ids -> text exact:
//  - identity normalization, no dummy prefix, no whitespace collapsing: the ids say the text as it
//    is (SentencePiece's defaults rewrite Unicode forms and spaces);
//  - byte_fallback with character_coverage 1.0: every character of the training text is a piece,
//    and any other UTF-8 encodes as byte pieces, so nothing is ever unknown;
//  - split_digits: numbers are read digit by digit, not as whatever runs were frequent;
//  - whitespace-only pieces allowed (indentation is text too);
//  - one thread and a fixed seed: the same texts give the same model, byte for byte.
// Each non-empty line is one training sentence (a line past 16 KiB goes in pieces cut at spaces:
// sentencepiece_module.cpp); newlines encode as byte pieces.
std::string train_tokenizer(const std::string& kind, int64_t vocab, const std::vector<std::string_view>& documents) {
  LOOM_CHECK_INPUT(kind == "bpe" || kind == "unigram", "tokenizer \"{}\" cannot be trained; hint: bpe or unigram",
                   kind);
  LOOM_CHECK_INPUT(vocab > 0 && vocab <= (int64_t{1} << 30), "--vocab {} must be in [1, 2^30]", vocab);
  const std::vector<std::pair<std::string, std::string>> options = {
      {"model_type", kind},
      {"vocab_size", std::to_string(vocab)},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", "65536"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  std::string model, error;
  if (!sentencepiece().train(options, documents, model, error)) throw training_error(kind, vocab, error);
  return model;
}

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> tokenizer_from_model(const std::string& model, const std::string& name) {
  if (is_tokenizer_json(model)) return byte_bpe_from_json(model, name);
  return std::make_unique<SentencePieceTokenizer>(model, name);
}

std::string read_tokenizer_file(const std::string& path, const std::string& role) {
  const std::filesystem::path dir(path);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return read_file_bytes({path, role});
  // A Llama's folder holds its SentencePiece model and a tokenizer.json of it: the model is read.
  for (const char* file : {"tokenizer.model", "tokenizer.json"})
    if (std::filesystem::exists(dir / file, ec)) return read_file_bytes({(dir / file).string(), role});
  LOOM_CHECK_INPUT(std::filesystem::exists(dir / "vocab.json", ec) && std::filesystem::exists(dir / "merges.txt", ec),
                   "{} {} is a folder with no tokenizer.model, tokenizer.json, or vocab.json and merges.txt; hint: "
                   "name a model folder's tokenizer files", role, path);
  return byte_bpe_json(read_file_bytes({(dir / "vocab.json").string(), role}),
                       read_file_bytes({(dir / "merges.txt").string(), role}), path);
}

bool has_tokenizer_files(const std::string& dir) {
  const std::filesystem::path d(dir);
  std::error_code ec;
  return std::filesystem::exists(d / "tokenizer.model", ec) || std::filesystem::exists(d / "tokenizer.json", ec) ||
         (std::filesystem::exists(d / "vocab.json", ec) && std::filesystem::exists(d / "merges.txt", ec));
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  return tokenizer_from_model(read_tokenizer_file(path, "tokenizer model"), path);
}

std::string read_tokenizer_model(const std::string& token_path, const TokenSidecar& sidecar) {
  const std::string path = tokenizer_model_path(token_path, sidecar);
  if (path.empty()) return "";
  const std::string side = sidecar_path(token_path);
  std::error_code ec;
  LOOM_CHECK_INPUT(std::filesystem::exists(path, ec),
                   "tokenizer model '{}' is missing: the sidecar '{}' of token file '{}' names it ({} tokenizer); "
                   "hint: keep the model beside the token file (`loom data prepare` writes them together), or "
                   "prepare the token file again",
                   path, side, token_path, sidecar.tokenizer);
  std::string model = read_file_bytes({path, "tokenizer model"});
  Fnv1a checksum;
  checksum.update(model);
  LOOM_CHECK_INPUT(sidecar.tokenizer_checksum.empty() || checksum.hex() == sidecar.tokenizer_checksum,
                   "tokenizer model '{}' has checksum {}, but the sidecar '{}' of token file '{}' says {}: it is not "
                   "the model these ids were made with; hint: prepare the token file again with this model "
                   "(`loom data prepare --tokenizer {}`)",
                   path, checksum.hex(), side, token_path, sidecar.tokenizer_checksum, path);
  return model;
}

std::unique_ptr<Tokenizer> tokenizer_of(const std::string& token_path) {
  const std::optional<TokenSidecar> sidecar = read_sidecar(token_path);
  if (!sidecar || sidecar->tokenizer == "byte") return byte_tokenizer();
  const std::string path = tokenizer_model_path(token_path, *sidecar);
  auto tokenizer = tokenizer_from_model(read_tokenizer_model(token_path, *sidecar), path);
  LOOM_CHECK_INPUT(tokenizer->vocab() == sidecar->vocab && tokenizer->kind() == sidecar->tokenizer,
                   "tokenizer model '{}' is a {} model of {} pieces, but the sidecar '{}' of token file '{}' says {} "
                   "of {}; hint: prepare the token file again",
                   path, tokenizer->kind(), tokenizer->vocab(), sidecar_path(token_path), token_path,
                   sidecar->tokenizer, sidecar->vocab);
  return tokenizer;
}

}  // namespace loom::data
