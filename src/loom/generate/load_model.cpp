#include "loom/generate/load_model.h"

#include <filesystem>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/checkpointer.h"
#include "loom/ckpt/manifest.h"
#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/generate/decoder.h"
#include "loom/models/registry.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"

namespace loom::generate {

namespace {

// Every parameter's value, allocated in the model's master type, as a piece of the checkpoint.
std::vector<ckpt::TensorPiece> allocate_pieces(models::Model& model, at::ScalarType master) {
  std::vector<ckpt::TensorPiece> pieces;
  for (nn::Param* p : model.params()) {
    p->value = at::empty(p->full_shape, at::TensorOptions().dtype(master));
    pieces.push_back(ckpt::whole_piece(p->name, p->value));
  }
  for (const nn::Buffer& b : model.buffers())  // the experts' balance bias (NOTE [Expert balance])
    pieces.push_back(ckpt::whole_piece(b.name, b.value));
  return pieces;
}

}  // namespace

LoadedModel load_model(const std::string& path, const models::ModelKinds& kinds) {
  LoadedModel m;
  m.dir = ckpt::checkpoint_of(path);
  const ckpt::Manifest manifest = ckpt::read_manifest(m.dir);
  ckpt::check_files(m.dir, manifest);
  m.step = manifest.step;
  m.config = parse_config(manifest.config, m.dir + "/manifest.json");
  m.tp = std::make_unique<dist::NullCommunicator>("tp");
  const ModelConfig& mc = m.config.model;
  // The products on this CPU's path whatever the run that saved it chose (NOTE [bf16 products]).
  const Bf16Products products = mc.dtype == DType::BFloat16
                                    ? nn::choose_bf16_products(Bf16Products::Auto, nn::this_cpu(), false).path
                                    : Bf16Products::Native;
  m.model = models::build_model(kinds.find(mc.kind), mc, {.tp = *m.tp}, products);
  const std::string layer = first_undecodable(m.model);
  LOOM_CHECK_INPUT(layer.empty(),
                   "checkpoint {} holds a model.kind = \"{}\" model, which cannot generate text (its layer {} does "
                   "not decode); hint: loom generate continues text with a language model such as \"gpt\" or "
                   "\"llama\"",
                   m.dir, mc.kind, layer);
  const std::vector<ckpt::TensorPiece> pieces = allocate_pieces(m.model, nn::master_type(mc.dtype));
  dist::NullCommunicator world;
  ckpt::load(m.dir, manifest, pieces, world);
  for (nn::Param* p : m.model.params()) nn::refresh_compute(*p, nn::activation_type(mc.dtype));
  return m;
}

namespace {

// The tokenizer --tokenizer names, else the run's data's.
std::unique_ptr<data::Tokenizer> find_tokenizer(const Config& config, const std::string& override_path) {
  if (!override_path.empty()) return data::load_tokenizer(override_path);
  const std::string& source = config.data.source;
  if (source.starts_with("tokens:")) return data::tokenizer_of(source.substr(7));
  if (source.starts_with("text:")) return data::byte_tokenizer();
  LOOM_CHECK_INPUT(false,
                   "the run trained on data.source = \"{}\", which names no tokenizer; hint: --tokenizer PATH (a "
                   "SentencePiece model, a tokenizer.json, or a model folder's tokenizer)",
                   source);
  return nullptr;
}

}  // namespace

std::unique_ptr<data::Tokenizer> run_tokenizer(const Config& config, const std::string& override_path) {
  std::unique_ptr<data::Tokenizer> tokenizer = find_tokenizer(config, override_path);
  LOOM_CHECK_INPUT(tokenizer->vocab() <= config.model.vocab,
                   "the {} tokenizer has {} ids, more than the model's vocabulary of {} (model.vocab); hint: "
                   "--tokenizer the model of the run's own token file",
                   tokenizer->kind(), tokenizer->vocab(), config.model.vocab);
  return tokenizer;
}

}  // namespace loom::generate
