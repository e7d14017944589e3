#pragma once
// NOTE [Byte-level BPE]: GPT-2's tokenizer, read from a Hugging Face tokenizer.json (model "BPE",
// pre-tokenizer "ByteLevel") or from GPT-2's vocab.json and merges.txt.
//  - The text is split into pre-tokens by GPT-2's pattern, applied code point by code point:
//    a contraction ('s 't 're 've 'm 'll 'd), else an optional space and a run of letters (\p{L}),
//    of numbers (\p{N}) or of anything else but white space, else white space: a run that ends the
//    text whole, else all of it but its last code point (which goes with what follows), or one.
//    Letters and numbers are Unicode's general categories (ICU's tables), white space its
//    White_Space property.
//  - Each pre-token's bytes become printable code points (the 188 printable bytes themselves, the
//    rest 256 + n in order), and the merges apply by rank: the adjacent pair of lowest rank is
//    merged everywhere in the pre-token, until no pair has a rank. The pieces' ids come from the
//    vocabulary; decoding maps the code points back to bytes.
//  - Added tokens (tokenizer.json's "added_tokens") are found in the text first, longest first,
//    and keep their own ids.
// A tokenizer.json with a normalizer, or another pre-tokenizer (a Llama's Metaspace), is refused:
// SentencePiece models (tokenizer.model) are the way loom reads those.
#include <memory>
#include <string>

#include "loom/data/tokenizer.h"

namespace loom::data {

// Whether a tokenizer model file's bytes are JSON (a tokenizer.json) rather than SentencePiece's.
bool is_tokenizer_json(const std::string& bytes);
// The byte-level BPE of a tokenizer.json's text; InputError naming `name` for another kind.
std::unique_ptr<Tokenizer> byte_bpe_from_json(const std::string& json, const std::string& name);
// GPT-2's vocab.json and merges.txt as the text of an equivalent tokenizer.json; InputError naming
// `name` (their folder) when they are malformed.
std::string byte_bpe_json(const std::string& vocab_json, const std::string& merges_txt, const std::string& name);

}  // namespace loom::data
