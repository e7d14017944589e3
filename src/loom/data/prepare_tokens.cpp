#include "loom/data/prepare_tokens.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "loom/core/error.h"
#include "loom/data/text_corpus.h"
#include "loom/data/tokenizer.h"

namespace loom::data {

namespace {

constexpr int64_t kDefaultVocab = 8000;
constexpr int64_t kUint16Ids = int64_t{1} << 16;

bool trained(const std::string& tokenizer) { return tokenizer == "bpe" || tokenizer == "unigram"; }

void check_options(const PrepareOptions& o) {
  LOOM_CHECK_INPUT(!o.texts.empty(), "no --text given; hint: --text FILE [FILE...]");
  LOOM_CHECK_INPUT(o.dtype == "uint16" || o.dtype == "uint32" || o.dtype == "auto",
                   "--dtype {} is not uint16, uint32 or auto", o.dtype);
  LOOM_CHECK_INPUT(o.vocab >= 0, "--vocab {} must be positive", o.vocab);
  LOOM_CHECK_INPUT(!o.valid_fraction || (*o.valid_fraction > 0 && *o.valid_fraction < 1),
                   "--valid-fraction {} must be in (0, 1): the share of the tokens held out for validation; hint: "
                   "e.g. --valid-fraction 0.01",
                   o.valid_fraction.value_or(0));
  LOOM_CHECK_INPUT(o.tokenizer != "byte" || o.vocab == 0 || o.vocab == 256,
                   "--vocab {} with --tokenizer byte: byte-level ids are the 256 byte values; hint: leave out --vocab, "
                   "or --tokenizer bpe (or unigram) to train a tokenizer of that many pieces",
                   o.vocab);
}

// The tokenizer, and its model file's bytes ("" for byte level).
struct Chosen {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string model;
};

// A model file the user gave (--tokenizer PATH), checked before any training or writing.
Chosen given_model(const PrepareOptions& o) {
  const PathUse use{o.tokenizer, "--tokenizer"};
  std::error_code ec;
  LOOM_CHECK_INPUT(std::filesystem::exists(o.tokenizer, ec),
                   "--tokenizer '{}' is neither byte, bpe, unigram nor an existing tokenizer (a SentencePiece model "
                   "file, a tokenizer.json, or a model folder's tokenizer files); hint: --tokenizer bpe --vocab 8000 "
                   "trains one",
                   o.tokenizer);
  Chosen chosen{nullptr, read_tokenizer_file(use.path, use.role)};
  chosen.tokenizer = tokenizer_from_model(chosen.model, o.tokenizer);
  LOOM_CHECK_INPUT(o.vocab == 0 || o.vocab == chosen.tokenizer->vocab(),
                   "--vocab {}, but the tokenizer model '{}' has {} pieces; hint: leave out --vocab to use the model's",
                   o.vocab, o.tokenizer, chosen.tokenizer->vocab());
  return chosen;
}

// Refused before a tokenizer of `vocab` pieces is trained or its ids written.
void check_dtype(const PrepareOptions& o, int64_t vocab) {
  LOOM_CHECK_INPUT(o.dtype != "uint16" || vocab <= kUint16Ids,
                   "--dtype uint16 holds ids below 65536, but the tokenizer has {} pieces; hint: --dtype uint32, or "
                   "auto",
                   vocab);
}

int token_width(const PrepareOptions& o, int64_t vocab) {
  check_dtype(o, vocab);
  return o.dtype == "uint32" || (o.dtype == "auto" && vocab > kUint16Ids) ? 4 : 2;
}

// The ids of every document, concatenated, and where each document's begin.
struct Encoded {
  std::vector<uint32_t> ids;
  std::vector<size_t> starts;  // one per document, and the end
  int64_t size(size_t d) const { return static_cast<int64_t>(starts[d + 1] - starts[d]); }
};

Encoded encode(const Tokenizer& tokenizer, const TextCorpus& corpus) {
  Encoded e;
  for (const std::string_view document : corpus.documents()) {
    e.starts.push_back(e.ids.size());
    for (const int64_t id : tokenizer.encode(document)) e.ids.push_back(static_cast<uint32_t>(id));
  }
  e.starts.push_back(e.ids.size());
  return e;
}

// Writes the ids of the documents `take` selects, as little-endian ids of `width` bytes.
int64_t write_ids(OutputFile& file, const Encoded& e, const std::vector<bool>& take, int width) {
  std::string bytes;
  int64_t count = 0;
  for (size_t d = 0; d < take.size(); ++d) {
    if (!take[d]) continue;
    bytes.clear();
    for (size_t i = e.starts[d]; i < e.starts[d + 1]; ++i)
      bytes.append(reinterpret_cast<const char*>(&e.ids[i]), static_cast<size_t>(width));  // little-endian
    file.write(bytes);
    count += e.size(d);
  }
  return count;
}

}  // namespace

std::string valid_split_path(const std::string& out) {
  const std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + ".valid" + p.extension().string())).string();
}

std::string tokenizer_model_beside(const std::string& out) { return out + ".tokenizer.model"; }

namespace {

struct OutputPaths {
  std::string tokens, model, valid;  // the token file, its tokenizer model, its validation split
};

// Every path, checked before the work starts (NOTE [Output files]), and enough documents for a split.
OutputPaths check_paths(const PrepareOptions& o, const TextCorpus& corpus, bool given) {
  const OutputPaths paths{o.out.path, tokenizer_model_beside(o.out.path), valid_split_path(o.out.path)};
  std::vector<PathUse> inputs = o.texts;
  std::vector<PathUse> outputs = {o.out, {sidecar_path(paths.tokens), o.out.role + " (its sidecar .json)"}};
  if (given) inputs.push_back({o.tokenizer, "--tokenizer"});
  if (o.tokenizer != "byte") outputs.push_back({paths.model, o.out.role + " (its tokenizer model)"});
  if (o.valid_fraction) {
    outputs.push_back({paths.valid, o.out.role + " (its validation split)"});
    outputs.push_back({sidecar_path(paths.valid), o.out.role + " (the validation split's sidecar .json)"});
  }
  check_output_paths(inputs, outputs);
  const size_t documents = corpus.documents().size();
  LOOM_CHECK_INPUT(!o.valid_fraction || documents >= 2,
                   "--valid-fraction {} holds out whole documents and trains on the others, but the text holds {} "
                   "document{} (a document is a file, or a paragraph that a blank line ends); hint: give more text "
                   "files or separate paragraphs with blank lines, or leave out --valid-fraction",
                   o.valid_fraction.value_or(0), documents, documents == 1 ? "" : "s");
  return paths;
}

// The sidecar of the token files (each gets its own token count when written).
TokenSidecar sidecar_of(const TextCorpus& corpus, const Tokenizer& tokenizer, const Chosen& chosen,
                        const std::string& model_path, int width) {
  TokenSidecar meta;
  meta.dtype = width == 2 ? "uint16" : "uint32";
  meta.vocab = tokenizer.vocab();
  meta.source = corpus.files().front().path;
  meta.source_checksum = corpus.files().front().checksum;
  meta.tokenizer = tokenizer.kind();
  for (const TextFile& file : corpus.files()) meta.sources.push_back({file.path, file.checksum});
  if (!chosen.model.empty()) {
    Fnv1a checksum;
    checksum.update(chosen.model);
    meta.tokenizer_model = std::filesystem::path(model_path).filename().string();
    meta.tokenizer_checksum = checksum.hex();
  }
  return meta;
}

// Every file is written to its temporary and flushed (a full disk is reported here), then
// renamed. Old sidecars go first: a failure between the renames leaves a token file without a
// sidecar, never a new file described by an old sidecar, and a new model with an old sidecar
// fails its checksum. `held`: the documents of the validation split (none without one).
PreparedTokens write_outputs(const OutputPaths& paths, const TokenSidecar& meta, const Encoded& encoded,
                             const std::vector<bool>& held, const std::string& model, bool split, int width) {
  PreparedTokens done;
  std::vector<bool> kept(held.size());
  for (size_t d = 0; d < held.size(); ++d) kept[d] = !held[d];
  OutputFile tokens(paths.tokens), model_file, valid;
  done.train = meta, done.train.tokens = write_ids(tokens, encoded, kept, width);
  if (!model.empty()) model_file = OutputFile(paths.model), model_file.write(model);
  if (split) {
    valid = OutputFile(paths.valid);
    done.valid = meta, done.valid->tokens = write_ids(valid, encoded, held, width);
    done.valid_path = paths.valid;
  }
  OutputFile side(sidecar_path(paths.tokens)), valid_side;
  side.write(to_json(done.train));
  if (done.valid) valid_side = OutputFile(sidecar_path(paths.valid)), valid_side.write(to_json(*done.valid));
  for (OutputFile* f : {&tokens, &model_file, &valid, &side, &valid_side})
    if (f->is_open()) f->flush();
  for (const OutputFile* f : {&side, &valid_side})
    if (f->is_open())
      LOOM_CHECK(::unlink(f->path().c_str()) == 0 || errno == ENOENT, "cannot replace '{}': {}", f->path(),
                 std::strerror(errno));
  for (OutputFile* f : {&model_file, &tokens, &valid, &side, &valid_side})
    if (f->is_open()) done.written.push_back(f->path()), f->commit();
  return done;
}

}  // namespace

PreparedTokens prepare_tokens(const PrepareOptions& o) {
  check_options(o);
  const TextCorpus corpus(o.texts);
  const bool given = o.tokenizer != "byte" && !trained(o.tokenizer);
  Chosen chosen = given ? given_model(o) : Chosen{};
  const OutputPaths paths = check_paths(o, corpus, given);
  if (o.tokenizer == "byte") chosen.tokenizer = byte_tokenizer();
  if (trained(o.tokenizer)) {
    const int64_t vocab = o.vocab > 0 ? o.vocab : kDefaultVocab;
    check_dtype(o, vocab);
    chosen.model = train_tokenizer(o.tokenizer, vocab, corpus.documents());
    chosen.tokenizer = tokenizer_from_model(chosen.model, paths.model);
  }
  const Tokenizer& tokenizer = *chosen.tokenizer;
  const int width = token_width(o, tokenizer.vocab());
  const Encoded encoded = encode(tokenizer, corpus);
  const size_t documents = corpus.documents().size();
  std::vector<int64_t> sizes(documents);
  for (size_t d = 0; d < documents; ++d) sizes[d] = encoded.size(d);
  const std::vector<bool> held = o.valid_fraction ? choose_valid(sizes, *o.valid_fraction)
                                                  : std::vector<bool>(documents, false);
  check_free_space(o.out, static_cast<int64_t>(encoded.ids.size()) * width +
                              static_cast<int64_t>(chosen.model.size()) + 4096);
  return write_outputs(paths, sidecar_of(corpus, tokenizer, chosen, paths.model, width), encoded, held,
                       chosen.model, o.valid_fraction.has_value(), width);
}

TokenSidecar write_byte_tokens(const PathUse& text, const PathUse& out, int token_bytes) {
  LOOM_CHECK_INPUT(token_bytes == 2 || token_bytes == 4, "token width {} must be 2 (uint16) or 4 (uint32)",
                   token_bytes);
  PrepareOptions options;
  options.texts = {text};
  options.dtype = token_bytes == 2 ? "uint16" : "uint32";
  options.out = out;
  return prepare_tokens(options).train;
}

}  // namespace loom::data
