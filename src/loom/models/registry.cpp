#include "loom/models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "loom/core/error.h"
#include "loom/models/dlrm.h"
#include "loom/models/gpt.h"
#include "loom/models/llama.h"

namespace loom::models {
namespace {

// The registrations: one line per kind.
const std::array<const ModelKind*, 3>& kinds() {
  static const std::array<const ModelKind*, 3> all{&gpt_kind(), &dlrm_kind(), &llama_kind()};
  return all;
}

}  // namespace

const ModelKind& model_kind(std::string_view name) {
  for (const ModelKind* kind : kinds())
    if (kind->name() == name) return *kind;
  throw InputError(fmt::format("model.kind = \"{}\" is not one of: {}", name, fmt::join(model_kind_names(), ", ")));
}

void validate_config(const Config& config) {
  validate(config);
  model_kind(config.model.kind).validate(config);
}

void check_sparse_partitions(const ParallelConfig& p, int64_t rows, std::string_view what) {
  LOOM_CHECK_INPUT(p.sparse_partitions <= rows,
                   "parallel.sparse_partitions = {} is more than the {} rows of {} to partition; hint: at most {}, "
                   "or 0 to choose automatically",
                   p.sparse_partitions, rows, what, rows);
}

std::vector<std::string_view> model_kind_names() {
  std::vector<std::string_view> names;
  for (const ModelKind* kind : kinds()) names.push_back(kind->name());
  return names;
}

}  // namespace loom::models
