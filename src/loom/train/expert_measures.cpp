#include "loom/train/expert_measures.h"

#include "loom/blocks/moe_block.h"
#include "loom/models/moe_config.h"

namespace loom::train {

std::vector<ExpertLoad> measure_experts(models::Model& model, const ModelConfig& config, dist::Communicator& world) {
  const int64_t blocks = models::moe_blocks(config), experts = config.moe_experts;
  if (blocks == 0) return {};
  // Row i: the i-th block with experts; columns: each expert's tokens, dropped, the balance
  // losses' sum, micro-batches.
  at::Tensor table = at::zeros({blocks, experts + 3}, at::TensorOptions().dtype(at::kDouble));
  for (const auto& layer : model.chain) {
    auto* moe = dynamic_cast<blocks::MoeBlock*>(layer.get());
    if (moe == nullptr) continue;
    const blocks::MoeLoad load = moe->take_trained_load();
    const int64_t row = (moe->block() + 1) / config.moe_every - 1;
    for (int64_t e = 0; e < experts; ++e) table[row][e] = static_cast<double>(load.counts[static_cast<size_t>(e)]);
    table[row][experts] = static_cast<double>(load.dropped);
    table[row][experts + 1] = load.aux_loss;
    table[row][experts + 2] = static_cast<double>(load.microbatches);
  }
  world.all_reduce(table, dist::ReduceOp::Sum);
  std::vector<ExpertLoad> out;
  const auto t = table.accessor<double, 2>();
  for (int64_t row = 0; row < blocks; ++row) {
    ExpertLoad l{.block = (row + 1) * config.moe_every - 1};
    for (int64_t e = 0; e < experts; ++e) l.tokens.push_back(static_cast<int64_t>(t[row][e]));
    l.dropped = static_cast<int64_t>(t[row][experts]);
    const double microbatches = t[row][experts + 2];
    l.aux_loss = microbatches > 0 ? t[row][experts + 1] / microbatches : 0.0;
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace loom::train
