#include "loom/pipeline/partition.h"

namespace loom::pipeline {

std::vector<StageChunk> take_stages(nn::Chain& model, const std::vector<int64_t>& cuts,
                                    const schedule::Schedule& schedule, int64_t pp_rank,
                                    const std::vector<nn::MemoryPolicy>& policy) {
  std::vector<StageChunk> out;
  nn::Chain mine;
  for (int64_t c = 0; c < schedule.chunks; ++c) {
    StageChunk chunk{.virtual_stage = schedule.virtual_stage(pp_rank, c)};
    const int64_t begin = cuts[chunk.virtual_stage], end = cuts[chunk.virtual_stage + 1];
    for (int64_t i = begin; i < end; ++i) {
      chunk.layers.push_back(model.chain[i].get());
      chunk.model_index.push_back(mine.chain.size());
      chunk.policy.push_back(policy[i]);
      mine.chain.push_back(std::move(model.chain[i]));
    }
    out.push_back(std::move(chunk));
  }
  model = std::move(mine);
  return out;
}

}  // namespace loom::pipeline
