#pragma once
// A checkpoint of any layout (dp, tp, pp, sp, ZeRO, any rank count) as one serial model in this
// process, for generation: the saved run's config builds its model kind over a one-rank tensor-
// parallel group, and every parameter is read from the stored boxes that cover it (NOTE
// [Checkpoints]; a vocabulary padded for tp was stored without its padding, and a serial model
// has none). The optimizer's moments are not read.
#include <memory>
#include <string>

#include "loom/core/config.h"
#include "loom/data/tokenizer.h"
#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/models/registry.h"

namespace loom::generate {

struct LoadedModel {
  std::string dir;  // the checkpoint read (step-NNNNNNN)
  int64_t step = 0;
  Config config;    // the saved run's
  std::unique_ptr<dist::Communicator> tp;  // the one-rank group the layers refer to
  models::Model model;

  // The most positions a sequence may reach: the learned position table's size, else seq_len.
  int64_t context() const { return config.position_count(); }
};

// Reads the checkpoint `dir` (or a checkpoint.dir's latest) into a serial model. InputError for
// a missing or damaged checkpoint (ckpt's own errors) and for a model kind whose layers cannot
// decode (a DLRM), before any weight is read. `kinds`: what the saved model.kind may name (a
// program's own kinds too).
LoadedModel load_model(const std::string& dir, const models::ModelKinds& kinds = models::ModelKinds::builtin());

// The tokenizer of the saved run: `override_path` (a SentencePiece model) when given, else the
// one of data.source: "tokens:PATH" -> the token file's (its sidecar), "text:PATH" -> byte level.
// InputError for synthetic data (it has no text), with a hint to pass --tokenizer, and for a
// tokenizer of more ids than model.vocab.
std::unique_ptr<data::Tokenizer> run_tokenizer(const Config& config, const std::string& override_path);

}  // namespace loom::generate
