#pragma once
// `loom ckpt import --from hf` and `loom ckpt export --to hf` (NOTE [Hugging Face layout]): a
// Hugging Face model folder as a loom checkpoint of step 0 (weights only, which `--init` starts a
// run from in any layout), and a loom checkpoint of any layout as a Hugging Face model folder.
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "loom/hf/hf_config.h"
#include "loom/models/registry.h"

namespace loom::hf {

struct Imported {
  HfModel hf;              // what config.json described, as loom's model
  std::string checkpoint;  // the step-0000000 directory written
  int64_t tensors = 0;     // loom parameters written
  std::string note;        // why the folder's tokenizer was not recorded ("" when it was, or there is none)
};

// Reads the folder `from` whole and checks it against its config.json (every tensor's name,
// shape and type; nothing left over but GPT-2's attention-mask buffers and a tied head equal to
// the token table) before anything is written; then writes the weights (float32, or float64
// when every stored tensor is) as the checkpoint of step 0 into the checkpoint folder `out`,
// which must hold no checkpoint yet. A tokenizer in the folder (tokenizer.model, tokenizer.json, or
// vocab.json and merges.txt) must fit the vocabulary; the checkpoint records where it is and the
// folder's config.json, for the export (a tokenizer loom cannot read is left out, with a note).
// InputError naming the key or file otherwise.
Imported import_hf(const std::string& from, const std::string& out,
                   const models::ModelKinds& kinds = models::ModelKinds::builtin());

struct Exported {
  int64_t tensors = 0;
  std::string tokenizer;  // where the tokenizer written came from ("" none)
};

// Writes the checkpoint `checkpoint` (a step directory or a checkpoint.dir: its latest) as the
// model folder `out` (new or empty): config.json, every weight as `type`, sharded past
// `shard_bytes`, and the tokenizer where loom has one: the run's token file's (data.source), else
// the one of the folder the weights were imported from, as tokenizer.model (SentencePiece) or
// tokenizer.json (byte-level BPE).
Exported export_hf(const std::string& checkpoint, const std::string& out, at::ScalarType type, int64_t shard_bytes);

// "float32", "bfloat16", "float16", "float64": a model folder's weight types; InputError naming
// `option` otherwise.
at::ScalarType weight_type(const std::string& name, const std::string& option);
std::string weight_type_name(at::ScalarType type);

}  // namespace loom::hf
