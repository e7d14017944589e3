#pragma once
// The model kinds loom trains (model.kind): each is one entry in this folder, registered once in
// registry.cpp, and the rest of loom asks it what it needs (docs/architecture.md, "Add a model
// kind"): the chain of layers for a layout, the data it reads, what its throughput counts and
// how its memory needs are named. Nothing outside this folder branches on the kind.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/batches.h"
#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/parallel/tp_region.h"

namespace loom::models {

// What a model's layers get from the run plan: the tensor-parallel group (one rank when serial)
// and how it is used, and the sequence-parallel group with its mode.
struct Parallelism {
  dist::Communicator& tp;
  parallel::TpOptions tp_options = {};
  parallel::SpOptions sp = {};
  dist::Communicator* ep = nullptr;  // the expert group (NOTE [Expert parallelism]); null: every expert here
};

// What a step's throughput counts: `item` per sample (tokens of a sequence, or the sample itself).
struct Throughput {
  std::string_view items;  // "tokens" | "samples": the metrics key is "<items>_per_s"
  std::string_view rate;   // on the progress line: "tok" | "samples"
  int64_t per_sample = 1;
};

class ModelKind {
 public:
  virtual ~ModelKind() = default;
  virtual std::string_view name() const = 0;
  // The kind's own checks of a config that passed loom::validate: its keys, the sizes of its
  // tensors and the layouts it supports (InputError).
  virtual void validate(const Config& config) const = 0;
  // Layers only; Model::initialise allocates and fills the parameters.
  virtual Model build(const ModelConfig& config, const Parallelism& parallelism) const = 0;
  virtual std::unique_ptr<data::Batches> open_data(const Config& config) const = 0;
  virtual data::SampleFormat sample_format() const = 0;
  virtual Throughput throughput(const ModelConfig& config) const = 0;
  // Row lookups a sample makes in each embedding table, for a rank holding `tokens` of each
  // sequence (the sparse path's memory estimate).
  virtual int64_t lookups_per_sample(const ModelConfig& config, int64_t tokens) const = 0;
  // For messages about memory: the keys that size the weights and one micro-batch's
  // activations, and what to change when a run does not fit.
  virtual std::string weight_keys(const ModelConfig& config) const = 0;
  virtual std::string activation_keys(const ModelConfig& config) const = 0;
  virtual std::string_view memory_hint() const = 0;
  // The model.* keys the kind reads (without "model."): `loom config --print` shows these and any
  // other set away from its default. Empty: every key (a program's own kind need not say).
  virtual std::vector<std::string_view> model_keys() const { return {}; }
};

// NOTE [Model kinds are a value]
// The kinds a run can train: a value passed to what builds models (the trainer, the plan), not a
// process-wide table, so two runs in one process may know different kinds and nothing is left
// registered behind a test. builtin() holds loom's own (gpt, dlrm, llama) and never changes; a
// program adds its kinds to a copy of it (docs/cpp-api.md). Each kind is shared, not copied: the
// registry keeps it alive as long as any copy of the registry does.
class ModelKinds {
 public:
  ModelKinds() = default;  // none
  static const ModelKinds& builtin();
  // InputError naming the kind when a kind of its name (built-in or not) is already here, or
  // when its name is empty.
  void add(std::shared_ptr<const ModelKind> kind);
  // The kind named `name`; InputError listing the known kinds otherwise.
  const ModelKind& find(std::string_view name) const;
  bool contains(std::string_view name) const;
  std::vector<std::string_view> names() const;

 private:
  std::vector<std::shared_ptr<const ModelKind>> kinds_;
};

// `kind`'s layers for `config`, every product on `products` (NOTE [bf16 products]: a rank's path,
// from nn::choose_bf16_products): the attention kernel's and each parameter's.
Model build_model(const ModelKind& kind, ModelConfig config, const Parallelism& parallelism, Bf16Products products);

// loom's own kinds: ModelKinds::builtin().find(name) and its names.
const ModelKind& model_kind(std::string_view name);
std::vector<std::string_view> model_kind_names();

// Every check of a config before any rank allocates: loom::validate, then the model kind's.
void validate_config(const Config& config, const ModelKinds& kinds = ModelKinds::builtin());

// Every check of a built chain that needs no data: each layer named, and no two distinct
// parameters with one name (a name is a parameter's identity in gradients, checkpoints and the
// layout-equivalence checks; one Param read by two layers, a tied table, is fine). `kind` names
// the model kind in the message. InputError otherwise.
void check_model(const Model& model, std::string_view kind);

// parallel.sparse_partitions against the `rows` of each table on the sparse path (`what` names
// them in the error): for a kind's validate.
void check_sparse_partitions(const ParallelConfig& p, int64_t rows, std::string_view what);

}  // namespace loom::models
