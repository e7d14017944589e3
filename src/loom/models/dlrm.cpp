#include "loom/models/dlrm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "loom/blocks/dlrm_layers.h"
#include "loom/core/checks.h"
#include "loom/core/error.h"

namespace loom::models {

Model build_dlrm(const ModelConfig& m) {
  Model model;
  int64_t width = m.dense_features;
  std::vector<int64_t> bottom = m.bottom_mlp;
  bottom.push_back(m.d_model);
  for (size_t i = 0; i < bottom.size(); ++i) {
    model.chain.push_back(std::make_unique<blocks::Dense>(fmt::format("bottom.{}", i), width, bottom[i], i == 0));
    width = bottom[i];
  }
  model.chain.push_back(std::make_unique<blocks::EmbeddingBags>(m.tables, m.table_rows, m.d_model, m.bag_size));
  width = (m.tables + 1) * m.d_model;
  for (size_t i = 0; i < m.top_mlp.size(); ++i) {
    model.chain.push_back(std::make_unique<blocks::Dense>(fmt::format("top.{}", i), width, m.top_mlp[i], false));
    width = m.top_mlp[i];
  }
  model.chain.push_back(std::make_unique<blocks::ClickLoss>(width));
  return model;
}

namespace {

class DlrmKind final : public ModelKind {
 public:
  std::string_view name() const override { return "dlrm"; }
  std::vector<std::string_view> model_keys() const override {
    return {"kind", "d_model", "tables", "table_rows", "bag_size", "dense_features", "bottom_mlp", "top_mlp",
            "dtype"};
  }
  void validate(const Config& config) const override;
  Model build(const ModelConfig& config, const Parallelism&) const override { return build_dlrm(config); }
  std::unique_ptr<data::Batches> open_data(const Config& config) const override {
    return data::click_batches(config);
  }
  data::SampleFormat sample_format() const override { return data::SampleFormat::Clicks; }
  Throughput throughput(const ModelConfig&) const override { return {"samples", "samples", 1}; }
  int64_t lookups_per_sample(const ModelConfig& config, int64_t) const override { return config.bag_size; }
  std::string weight_keys(const ModelConfig& m) const override {
    return fmt::format("model.tables = {} x model.table_rows = {} x model.d_model = {}", m.tables, m.table_rows,
                       m.d_model);
  }
  std::string activation_keys(const ModelConfig&) const override { return ""; }
  std::string_view memory_hint() const override {
    return "shrink model.table_rows or spread the tables over more ranks (parallel.dp with parallel.sparse = "
           "\"auto\")";
  }
};

void check_keys(const ModelConfig& m) {
  for (auto [key, value] : {std::pair{"model.d_model", m.d_model}, {"model.tables", m.tables},
                            {"model.table_rows", m.table_rows}, {"model.bag_size", m.bag_size},
                            {"model.dense_features", m.dense_features}})
    check_positive(key, value);
  for (auto [key, sizes] : {std::pair{"model.bottom_mlp", &m.bottom_mlp}, {"model.top_mlp", &m.top_mlp}})
    for (int64_t size : *sizes)
      LOOM_CHECK_INPUT(size > 0, "{} = [{}]: every hidden size must be positive", key, fmt::join(*sizes, ", "));
}

// The largest tensors of the model and of one micro-batch (NOTE [Sizes that fit]).
void check_sizes(const Config& c) {
  const ModelConfig& m = c.model;
  const Factor d_model{"model.d_model", m.d_model}, micro_batch{"train.micro_batch", c.train.micro_batch};
  check_product("the embedding tables", {{"model.tables", m.tables}, {"model.table_rows", m.table_rows}, d_model});
  check_product("a micro-batch's ids", {micro_batch, {"model.tables", m.tables}, {"model.bag_size", m.bag_size}});
  check_mlp("model.bottom_mlp", m.bottom_mlp, {"model.dense_features", m.dense_features});
  check_mlp("model.top_mlp", m.top_mlp,
            {"its input width (model.tables + 1) x model.d_model", (m.tables + 1) * m.d_model});
}

// Data parallelism only (its tables shard over dp on the sparse path), on click data.
void check_layout_and_data(const ParallelConfig& p, const DataConfig& d) {
  LOOM_CHECK_INPUT(p.tp == 1 && p.pp == 1 && p.sp == 1,
                   "model.kind = \"dlrm\" trains with data parallelism only: parallel.tp ({}), pp ({}) and sp ({}) "
                   "must be 1; hint: raise parallel.dp instead",
                   p.tp, p.pp, p.sp);
  LOOM_CHECK_INPUT(d.source == "synthetic" || (d.source.starts_with("clicks:") && d.source.size() > 7),
                   "model.kind = \"dlrm\" reads click data: data.source = \"synthetic\" or \"clicks:PATH\", not \"{}\"",
                   d.source);
  LOOM_CHECK_INPUT(std::isfinite(d.zipf) && d.zipf > 0,
                   "data.zipf = {} must be a positive number (the Zipf exponent of the click ids)", d.zipf);
}

void DlrmKind::validate(const Config& config) const {
  check_keys(config.model);
  check_sizes(config);
  check_layout_and_data(config.parallel, config.data);
  check_sparse_partitions(config.parallel, config.model.table_rows, "each table");
}

}  // namespace

const ModelKind& dlrm_kind() {
  static const DlrmKind kind;
  return kind;
}

}  // namespace loom::models
