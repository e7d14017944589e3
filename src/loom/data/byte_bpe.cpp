#include "loom/data/byte_bpe.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "loom/core/error.h"

namespace loom::data {
namespace {

// GPT-2's printable stand-ins for the 256 byte values (NOTE [Byte-level BPE]).
std::array<char32_t, 256> byte_chars() {
  std::array<char32_t, 256> out{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return out;
}

void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12)), s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18)), s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F)), s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// The code point at s[i], advancing i; a byte that starts no valid sequence is U+FFFD, one byte.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int extra = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
  if (extra < 0 || s.size() - i <= static_cast<size_t>(extra)) return ++i, 0xFFFD;  // too few bytes left
  char32_t c = extra == 0 ? b : b & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto t = static_cast<unsigned char>(s[i + k]);
    if ((t >> 6) != 2) return ++i, 0xFFFD;
    c = (c << 6) | (t & 0x3F);
  }
  i += static_cast<size_t>(extra) + 1;
  return c;
}

enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass class_of(char32_t c) {
  if (u_isUWhiteSpace(static_cast<UChar32>(c))) return CharClass::Space;
  const int8_t t = u_charType(static_cast<UChar32>(c));
  if (t >= U_UPPERCASE_LETTER && t <= U_OTHER_LETTER) return CharClass::Letter;
  if (t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER) return CharClass::Number;
  return CharClass::Other;
}

// The end of the pre-token that starts at code point i (NOTE [Byte-level BPE]).
size_t pre_token_end(const std::vector<char32_t>& cp, const std::vector<CharClass>& cls, size_t i) {
  const size_t n = cp.size();
  if (cp[i] == U'\'') {
    for (std::u32string_view suffix : {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"})
      if (n - i - 1 >= suffix.size() && std::equal(suffix.begin(), suffix.end(), cp.begin() + static_cast<long>(i) + 1))
        return i + 1 + suffix.size();
  }
  const size_t k = (cp[i] == U' ' && i + 1 < n && cls[i + 1] != CharClass::Space) ? i + 1 : i;
  size_t j = k;
  if (cls[k] != CharClass::Space) {
    while (j < n && cls[j] == cls[k]) ++j;
    return j;
  }
  while (j < n && cls[j] == CharClass::Space) ++j;
  return (j == n || j - i == 1) ? j : j - 1;
}

constexpr int64_t kMaxIds = int64_t{1} << 24;  // ids are dense: a vocabulary of this many pieces at most
constexpr size_t kCacheEntries = size_t{1} << 16;   // pre-tokens remembered before the cache starts over

class ByteBpe final : public Tokenizer {
 public:
  ByteBpe(const nlohmann::json& j, const std::string& name);
  std::string kind() const override { return "byte-bpe"; }
  int64_t vocab() const override { return static_cast<int64_t>(pieces_.size()); }
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;

 private:
  void encode_text(std::string_view text, std::vector<int64_t>& ids) const;
  const std::vector<int64_t>& encode_pre_token(std::string_view bytes) const;

  std::array<char32_t, 256> chars_ = byte_chars();
  std::unordered_map<char32_t, unsigned char> bytes_;         // chars_ inverted
  std::unordered_map<std::string, int64_t> ids_;              // piece -> id
  std::unordered_map<std::string, int64_t> ranks_;            // "a b" -> merge rank
  std::vector<std::string> pieces_;                           // id -> piece ("" where none)
  std::vector<bool> added_;                                   // id -> an added token (raw text)
  std::vector<std::pair<std::string, int64_t>> added_tokens_;  // longest first
  bool prefix_space_ = false;
  std::string name_;
  mutable std::mutex mutex_;  // guards the cache
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

// The pre-tokenizer of a tokenizer.json must be GPT-2's: ByteLevel with its own pattern, alone (or
// the one step of a Sequence); returns its add_prefix_space.
bool byte_level_prefix_space(const nlohmann::json& j, const std::string& name) {
  nlohmann::json p = j.value("pre_tokenizer", nlohmann::json());
  if (p.is_object() && p.value("type", "") == "Sequence" && p.value("pretokenizers", nlohmann::json()).size() == 1)
    p = p["pretokenizers"][0];
  const bool gpt2 = p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true);
  LOOM_CHECK_INPUT(gpt2, "{}: its pre-tokenizer is {}, and loom reads byte-level BPE with GPT-2's pattern (a ByteLevel "
                   "pre-tokenizer alone); hint: a Llama 3 tokenizer.json splits by a pattern of its own, which loom "
                   "does not read yet; a SentencePiece model (a Llama 2's tokenizer.model) is read as it is", name,
                   j.value("pre_tokenizer", nlohmann::json()).dump());
  return p.value("add_prefix_space", false);
}

ByteBpe::ByteBpe(const nlohmann::json& j, const std::string& name) : name_(name) {
  LOOM_CHECK_INPUT(j.is_object() && j.contains("model") && j.at("model").value("type", "") == "BPE",
                   "{}: not a BPE tokenizer.json (its \"model\" has no \"type\": \"BPE\")", name);
  LOOM_CHECK_INPUT(j.value("normalizer", nlohmann::json()).is_null(), "{}: it has a normalizer ({}), which loom does "
                   "not apply; hint: byte-level BPE tokenizers (GPT-2's) have none", name, j.at("normalizer").dump());
  prefix_space_ = byte_level_prefix_space(j, name);
  LOOM_CHECK_INPUT(!j.at("model").value("ignore_merges", false), "{}: \"ignore_merges\": true (whole words first), "
                   "which loom's byte-level BPE does not do", name);
  for (int b = 0; b < 256; ++b) bytes_[chars_[b]] = static_cast<unsigned char>(b);
  const nlohmann::json& m = j.at("model");
  // Ids are dense: below twice the pieces named (and 256), so a stray large id cannot make the table
  // of pieces allocate for ids nobody names.
  const int64_t named = static_cast<int64_t>(m.value("vocab", nlohmann::json::object()).size() +
                                             j.value("added_tokens", nlohmann::json::array()).size());
  const int64_t id_bound = std::min(kMaxIds, 2 * named + 256);
  auto add = [&](const std::string& piece, const nlohmann::json& id, bool added) {
    LOOM_CHECK_INPUT(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < id_bound,
                     "{}: the id of \"{}\" is {}, not an id below {} (ids are dense: under twice the {} pieces "
                     "named, and under {})", name, piece, id.dump(), id_bound, named, kMaxIds);
    const auto k = static_cast<size_t>(id.get<int64_t>());
    if (k >= pieces_.size()) pieces_.resize(k + 1), added_.resize(k + 1);
    pieces_[k] = piece, added_[k] = added;
    ids_[piece] = static_cast<int64_t>(k);
  };
  LOOM_CHECK_INPUT(m.contains("vocab") && m.at("vocab").is_object(), "{}: model.vocab is not an object", name);
  for (const auto& [piece, id] : m.at("vocab").items()) add(piece, id, false);
  if (j.contains("added_tokens") && j.at("added_tokens").is_array())
    for (const auto& t : j.at("added_tokens")) {
      add(t.at("content").get<std::string>(), t.at("id"), true);
      added_tokens_.emplace_back(t.at("content").get<std::string>(), t.at("id").get<int64_t>());
    }
  std::sort(added_tokens_.begin(), added_tokens_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  const nlohmann::json merges = m.value("merges", nlohmann::json::array());
  for (size_t r = 0; r < merges.size(); ++r) {
    const nlohmann::json& e = merges[r];
    const std::string pair = e.is_string() ? e.get<std::string>()
                             : e.is_array() && e.size() == 2 ? e[0].get<std::string>() + " " + e[1].get<std::string>()
                                                              : std::string();
    LOOM_CHECK_INPUT(std::count(pair.begin(), pair.end(), ' ') == 1, "{}: merge {} is {}, not two pieces", name, r,
                     e.dump());
    ranks_.emplace(pair, static_cast<int64_t>(r));
  }
  for (int b = 0; b < 256; ++b) {
    std::string one;
    append_utf8(one, chars_[b]);
    LOOM_CHECK_INPUT(ids_.contains(one), "{}: the vocabulary lacks the piece of byte {}; a byte-level BPE has all 256",
                     name, b);
  }
}

const std::vector<int64_t>& ByteBpe::encode_pre_token(std::string_view bytes) const {
  const std::string key(bytes);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  if (cache_.size() >= kCacheEntries) cache_.clear();
  std::vector<std::string> parts;
  for (const char b : bytes) append_utf8(parts.emplace_back(), chars_[static_cast<unsigned char>(b)]);
  while (parts.size() > 1) {
    int64_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks_.find(parts[i] + " " + parts[i + 1]);
      if (it != ranks_.end() && (best < 0 || it->second < best)) best = it->second, at = i;
    }
    if (best < 0) break;
    const std::string a = parts[at], b = parts[at + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) merged.push_back(a + b), ++i;
      else merged.push_back(parts[i]);
    }
    parts = std::move(merged);
  }
  std::vector<int64_t> ids;
  for (const std::string& p : parts) {
    const auto it = ids_.find(p);
    LOOM_CHECK_INPUT(it != ids_.end(), "{}: merging gives the piece \"{}\", which its vocabulary lacks", name_, p);
    ids.push_back(it->second);
  }
  return cache_.emplace(key, std::move(ids)).first->second;
}

void ByteBpe::encode_text(std::string_view text, std::vector<int64_t>& ids) const {
  std::string prefixed;  // add_prefix_space: each piece between added tokens starts with a space
  if (prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed.assign(1, ' ').append(text);
    text = prefixed;
  }
  std::vector<char32_t> cp;
  std::vector<size_t> at;
  for (size_t i = 0; i < text.size();) at.push_back(i), cp.push_back(next_code_point(text, i));
  at.push_back(text.size());
  std::vector<CharClass> cls;
  for (const char32_t c : cp) cls.push_back(class_of(c));
  for (size_t i = 0; i < cp.size();) {
    const size_t j = pre_token_end(cp, cls, i);
    for (const int64_t id : encode_pre_token(text.substr(at[i], at[j] - at[i]))) ids.push_back(id);
    i = j;
  }
}

std::vector<int64_t> ByteBpe::encode(std::string_view text) const {
  const std::lock_guard lock(mutex_);
  std::vector<int64_t> ids;
  size_t from = 0;
  while (from < text.size()) {  // the next added token, longest first where several start there
    size_t next = text.size();
    const std::pair<std::string, int64_t>* token = nullptr;
    for (const auto& t : added_tokens_) {
      const size_t p = text.find(t.first, from);
      if (!t.first.empty() && p < next) next = p, token = &t;
    }
    encode_text(text.substr(from, next - from), ids);
    if (!token) break;
    ids.push_back(token->second);
    from = next + token->first.size();
  }
  return ids;
}

std::string ByteBpe::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (const int64_t id : ids) {
    LOOM_CHECK(id >= 0 && id < vocab(), "byte-bpe tokenizer: id {} is outside its vocabulary of {}", id, vocab());
    const std::string& piece = pieces_[static_cast<size_t>(id)];
    if (added_[static_cast<size_t>(id)]) {
      out += piece;
      continue;
    }
    for (size_t i = 0; i < piece.size();) {
      const auto it = bytes_.find(next_code_point(piece, i));
      if (it != bytes_.end()) out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace

bool is_tokenizer_json(const std::string& bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string::npos && bytes[first] == '{';
}

std::unique_ptr<Tokenizer> byte_bpe_from_json(const std::string& json, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    LOOM_CHECK_INPUT(false, "{}: not JSON ({})", name, e.what());
  }
  try {
    return std::make_unique<ByteBpe>(j, name);
  } catch (const nlohmann::json::exception& e) {  // a field of another type than a tokenizer.json's
    LOOM_CHECK_INPUT(false, "{}: not a tokenizer.json loom reads ({})", name, e.what());
  }
  return nullptr;
}

std::string byte_bpe_json(const std::string& vocab_json, const std::string& merges_txt, const std::string& name) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    LOOM_CHECK_INPUT(false, "{}/vocab.json: not JSON ({})", name, e.what());
  }
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(merges_txt);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    merges.push_back(line);
  }
  // Every field the Hugging Face library needs to load it, as GPT-2's own tokenizer.json has them.
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                     {"use_regex", true}};
  const nlohmann::json json{{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
                            {"added_tokens", nlohmann::json::array()}, {"normalizer", nullptr},
                            {"pre_tokenizer", byte_level}, {"post_processor", byte_level}, {"decoder", byte_level},
                            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                                       {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                                       {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}}};
  try {
    return json.dump();
  } catch (const nlohmann::json::type_error&) {  // a merges.txt line that is not UTF-8 (JSON text must be)
    LOOM_CHECK_INPUT(false, "{}/merges.txt: a line is not UTF-8 text; hint: GPT-2's merges.txt is UTF-8, one merge "
                     "\"a b\" a line", name);
  }
  return {};
}

}  // namespace loom::data
