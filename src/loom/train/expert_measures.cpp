#include "loom/train/expert_measures.h"

#include "loom/blocks/moe_block.h"
#include "loom/models/moe_config.h"

namespace loom::train {
namespace {

// Each block with experts in the rank's model, with its row among the step's measures.
template <class Fn>
void for_each_moe(models::Model& model, const ModelConfig& config, Fn&& fn) {
  for (const auto& layer : model.chain)
    if (auto* moe = dynamic_cast<blocks::MoeBlock*>(layer.get())) fn(*moe, (moe->block() + 1) / config.moe_every - 1);
}

}  // namespace

std::vector<ExpertLoad> measure_experts(models::Model& model, const ModelConfig& config, dist::Communicator& world) {
  const int64_t blocks = models::moe_blocks(config), experts = config.moe_experts;
  if (blocks == 0) return {};
  // Row i: the i-th block with experts; columns: each expert's kept tokens, each expert's chosen
  // ones, dropped, the balance losses' sum, micro-batches.
  at::Tensor table = at::zeros({blocks, 2 * experts + 3}, at::TensorOptions().dtype(at::kDouble));
  for_each_moe(model, config, [&](blocks::MoeBlock& moe, int64_t row) {
    const blocks::MoeLoad load = moe.take_trained_load();
    for (int64_t e = 0; e < experts; ++e) {
      table[row][e] = static_cast<double>(load.counts[static_cast<size_t>(e)]);
      table[row][experts + e] = static_cast<double>(load.chosen[static_cast<size_t>(e)]);
    }
    table[row][2 * experts] = static_cast<double>(load.dropped);
    table[row][2 * experts + 1] = load.aux_loss;
    table[row][2 * experts + 2] = static_cast<double>(load.microbatches);
  });
  world.all_reduce(table, dist::ReduceOp::Sum);
  std::vector<ExpertLoad> out;
  const auto t = table.accessor<double, 2>();
  for (int64_t row = 0; row < blocks; ++row) {
    ExpertLoad l{.block = (row + 1) * config.moe_every - 1};
    for (int64_t e = 0; e < experts; ++e) {
      l.tokens.push_back(static_cast<int64_t>(t[row][e]));
      l.chosen.push_back(static_cast<int64_t>(t[row][experts + e]));
    }
    l.dropped = static_cast<int64_t>(t[row][2 * experts]);
    const double microbatches = t[row][2 * experts + 2];
    l.aux_loss = microbatches > 0 ? t[row][2 * experts + 1] / microbatches : 0.0;
    out.push_back(std::move(l));
  }
  return out;
}

void balance_experts(models::Model& model, const ModelConfig& config, const std::vector<ExpertLoad>& loads) {
  for_each_moe(model, config,
               [&](blocks::MoeBlock& moe, int64_t row) { moe.balance(loads.at(static_cast<size_t>(row)).chosen); });
}

}  // namespace loom::train
