#include "loom/models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "loom/core/error.h"
#include "loom/models/dlrm.h"
#include "loom/models/gpt.h"
#include "loom/models/llama.h"
#include "loom/nn/products.h"

namespace loom::models {

const ModelKinds& ModelKinds::builtin() {
  // Immutable once built: the built-in kinds are function-local statics that live as long as the
  // process, so the registry shares them without owning them.
  static const ModelKinds all = [] {
    ModelKinds kinds;
    for (const ModelKind* kind : {&gpt_kind(), &dlrm_kind(), &llama_kind()})
      kinds.add(std::shared_ptr<const ModelKind>(kind, [](const ModelKind*) {}));
    return kinds;
  }();
  return all;
}

void ModelKinds::add(std::shared_ptr<const ModelKind> kind) {
  LOOM_CHECK(kind != nullptr, "ModelKinds::add: no model kind (a null pointer)");
  const std::string_view name = kind->name();
  LOOM_CHECK_INPUT(!name.empty(), "a model kind has an empty name; hint: name() returns what model.kind selects");
  LOOM_CHECK_INPUT(!contains(name),
                   "model kind \"{}\" is registered twice; hint: each kind is added once, and its name differs from "
                   "every other kind's (known: {})",
                   name, fmt::join(names(), ", "));
  kinds_.push_back(std::move(kind));
}

bool ModelKinds::contains(std::string_view name) const {
  for (const auto& kind : kinds_)
    if (kind->name() == name) return true;
  return false;
}

const ModelKind& ModelKinds::find(std::string_view name) const {
  for (const auto& kind : kinds_)
    if (kind->name() == name) return *kind;
  throw InputError(fmt::format("model.kind = \"{}\" is not one of: {}", name, fmt::join(names(), ", ")));
}

std::vector<std::string_view> ModelKinds::names() const {
  std::vector<std::string_view> out;
  for (const auto& kind : kinds_) out.push_back(kind->name());
  return out;
}

const ModelKind& model_kind(std::string_view name) { return ModelKinds::builtin().find(name); }

std::vector<std::string_view> model_kind_names() { return ModelKinds::builtin().names(); }

void validate_config(const Config& config, const ModelKinds& kinds) {
  validate(config);
  kinds.find(config.model.kind).validate(config);
}

void check_model(const Model& model, std::string_view kind) {
  LOOM_CHECK_INPUT(!model.chain.empty(), "model.kind = \"{}\" built no layers; hint: build() returns the whole chain", kind);
  std::map<std::string, std::pair<const nn::Param*, std::string>, std::less<>> owners;  // name -> (param, its layer)
  for (size_t i = 0; i < model.chain.size(); ++i) {
    nn::Layer* layer = model.chain[i].get();
    LOOM_CHECK_INPUT(layer != nullptr, "model.kind = \"{}\": layer {} of the chain is null", kind, i);
    const std::string name = layer->name();
    LOOM_CHECK_INPUT(!name.empty(), "model.kind = \"{}\": layer {} of the chain has an empty name", kind, i);
    for (const nn::Param* p : layer->params()) {
      LOOM_CHECK_INPUT(!p->name.empty(), "model.kind = \"{}\": layer \"{}\" has a parameter with an empty name", kind,
                       name);
      const auto [it, fresh] = owners.try_emplace(p->name, p, name);
      LOOM_CHECK_INPUT(fresh || it->second.first == p,
                       "model.kind = \"{}\": parameter name \"{}\" is used twice, by layer \"{}\" and by layer \"{}\"; "
                       "hint: each parameter's name is unique in the model (prefix it with its layer's name)",
                       kind, p->name, it->second.second, name);
    }
  }
}

void check_sparse_partitions(const ParallelConfig& p, int64_t rows, std::string_view what) {
  LOOM_CHECK_INPUT(p.sparse_partitions <= rows,
                   "parallel.sparse_partitions = {} is more than the {} rows of {} to partition; hint: at most {}, "
                   "or 0 to choose automatically",
                   p.sparse_partitions, rows, what, rows);
}

Model build_model(const ModelKind& kind, ModelConfig config, const Parallelism& parallelism, Bf16Products products) {
  config.bf16_products = products;
  Model model = kind.build(config, parallelism);
  nn::set_products(model.params(), products);
  return model;
}

}  // namespace loom::models
