#include "loom/models/dlrm.h"

#include <fmt/format.h>

#include "loom/nn/dlrm_layers.h"

namespace loom::models {

Model build_dlrm(const ModelConfig& m) {
  Model model;
  int64_t width = m.dense_features;
  std::vector<int64_t> bottom = m.bottom_mlp;
  bottom.push_back(m.d_model);
  for (size_t i = 0; i < bottom.size(); ++i) {
    model.chain.push_back(std::make_unique<nn::Dense>(fmt::format("bottom.{}", i), width, bottom[i], i == 0));
    width = bottom[i];
  }
  model.chain.push_back(std::make_unique<nn::EmbeddingBags>(m.tables, m.table_rows, m.d_model, m.bag_size));
  width = (m.tables + 1) * m.d_model;
  for (size_t i = 0; i < m.top_mlp.size(); ++i) {
    model.chain.push_back(std::make_unique<nn::Dense>(fmt::format("top.{}", i), width, m.top_mlp[i], false));
    width = m.top_mlp[i];
  }
  model.chain.push_back(std::make_unique<nn::ClickLoss>(width));
  return model;
}

}  // namespace loom::models
