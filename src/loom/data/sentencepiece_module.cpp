// The SentencePiece module (NOTE [SentencePiece in its own scope]): the only code that calls
// SentencePiece, built as libloom_sentencepiece.so.
#include "loom/data/sentencepiece_module.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

namespace loom::data::spm {
namespace {

// The non-empty lines of the documents, one training sentence each; a line longer than
// kLongest bytes goes in pieces, cut after a space where there is one (else between characters),
// since SentencePiece skips longer sentences and a text of one long line would train on nothing.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  static constexpr size_t kLongest = 16384;  // under max_sentence_length
  explicit LineIterator(const std::vector<std::string_view>& documents) : documents_(documents) { find(); }
  bool done() const override { return document_ >= documents_.size(); }
  void Next() override { find(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void find() {
    for (; document_ < documents_.size(); ++document_, at_ = 0) {
      const std::string_view d = documents_[document_];
      while (at_ < d.size()) {
        const size_t newline = std::min(d.find('\n', at_), d.size());
        size_t end = newline;
        if (end - at_ > kLongest) {
          end = at_ + kLongest;
          const size_t space = d.substr(at_ + kLongest / 2, kLongest / 2).rfind(' ');
          if (space != std::string_view::npos) end = at_ + kLongest / 2 + space + 1;
          else
            while ((static_cast<unsigned char>(d[end]) & 0xC0) == 0x80) --end;  // not inside a character
        }
        line_.assign(d.substr(at_, end - at_));
        at_ = end == newline ? newline + 1 : end;
        if (!line_.empty()) return;
      }
    }
  }
  const std::vector<std::string_view>& documents_;
  size_t document_ = 0, at_ = 0;
  std::string line_;
};

bool train(const std::vector<std::pair<std::string, std::string>>& options,
           const std::vector<std::string_view>& documents, std::string& model, std::string& error) {
  const std::unordered_map<std::string, std::string> named(options.begin(), options.end());
  sentencepiece::SetRandomGeneratorSeed(1234);
  LineIterator lines(documents);
  const auto status = sentencepiece::SentencePieceTrainer::Train(named, &lines, &model);
  if (!status.ok()) error = status.ToString();
  return status.ok();
}

void* load(const std::string& model, std::string& error) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(model);
  if (status.ok()) return processor.release();
  error = status.ToString();
  return nullptr;
}

void release(void* processor) { delete static_cast<sentencepiece::SentencePieceProcessor*>(processor); }

void pieces(const void* processor, std::vector<std::string>& pieces, std::vector<PieceKind>& kinds) {
  const auto& p = *static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
  pieces.clear(), kinds.clear();
  for (int id = 0; id < p.GetPieceSize(); ++id) {
    pieces.push_back(p.IdToPiece(id));
    kinds.push_back(p.IsByte(id)      ? PieceKind::Byte
                    : p.IsUnknown(id) ? PieceKind::Unknown
                    : p.IsControl(id) ? PieceKind::Control
                    : p.IsUnused(id)  ? PieceKind::Unused
                                      : PieceKind::Normal);
  }
}

bool encode(const void* processor, std::string_view text, std::vector<int>& ids, std::string& error) {
  const auto status = static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->Encode(text, &ids);
  if (!status.ok()) error = status.ToString();
  return status.ok();
}

}  // namespace
}  // namespace loom::data::spm

extern "C" const loom::data::spm::Api* loom_sentencepiece_api() {
  using namespace loom::data::spm;
  static const Api api{Api::kVersion, train, load, release, pieces, encode};
  return &api;
}
