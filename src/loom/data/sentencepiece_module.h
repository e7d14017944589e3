#pragma once
// NOTE [SentencePiece in its own scope]: Debian's libsentencepiece carries its own copy of the
// protobuf runtime (3.14) and exports every symbol of it, while libtorch's dependencies load the
// system libprotobuf (3.21). Linked into one program, whichever comes first in the global symbol
// scope serves both: libprotobuf's start-up code then runs SentencePiece's copy (a crash before
// main), or SentencePiece runs libprotobuf's (a version check that aborts). So loom links
// SentencePiece into a module of its own, libloom_sentencepiece.so (built beside the `loom`
// executable), and tokenizer.cpp opens it with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): its symbols stay
// out of the global scope, and its own references resolve inside it first. The module exports one
// C function returning the table below; both sides are built by the same compiler from this
// header, so the table passes standard-library types. The module knows nothing else of loom.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::data::spm {

// What an id of a model is.
enum class PieceKind : int { Normal = 0, Byte = 1, Unknown = 2, Control = 3, Unused = 4 };

struct Api {
  static constexpr int kVersion = 1;
  int version = kVersion;
  // Trains a model with SentencePiece's named `options` on the non-empty lines of `documents`;
  // writes the model file's bytes to `model`, or SentencePiece's message to `error` and returns false.
  bool (*train)(const std::vector<std::pair<std::string, std::string>>& options,
                const std::vector<std::string_view>& documents, std::string& model, std::string& error);
  // A processor of the model file's bytes `model`; nullptr with `error` when they are not a model.
  void* (*load)(const std::string& model, std::string& error);
  void (*release)(void* processor);
  // Each id's piece (as stored: spaces as U+2581, bytes as "<0xAB>") and kind.
  void (*pieces)(const void* processor, std::vector<std::string>& pieces, std::vector<PieceKind>& kinds);
  bool (*encode)(const void* processor, std::string_view text, std::vector<int>& ids, std::string& error);
};

}  // namespace loom::data::spm

// The module's one export.
extern "C" const loom::data::spm::Api* loom_sentencepiece_api();
