#pragma once
// Every parameter's value and gradient as views into two flat buffers, in the reverse of chain
// order: backward finishes the last layer first, so gradient buckets (contiguous ranges of the
// flat gradient) become complete front to back. The buffers are padded to a multiple of
// `pad_multiple` elements so that ZeRO can cut them into equal shards. Tables on the sparse path
// (Param::sparse) are not in them.
#include <vector>

#include "loom/models/model.h"

namespace loom::replicas {

struct FlatSlot {
  nn::Param* param;
  size_t layer;    // index in the chain
  int64_t offset;  // first element in the flat buffers
  int64_t numel;
};

// NOTE [Parameter placements]: the dense path sums each gradient over every data axis (dp, sp,
// ep) in one group, so it takes only parameters whose gradient is a summand over all of them; one
// sharded over a data axis (an expert under expert parallelism) needs a reduction group of its own
// (FlatParams::experts). Throws loom::Error naming the parameter and its placement otherwise.
void check_summed_over_data_axes(const nn::Param& p);
// Whether `p` is sharded over the expert axis (NOTE [Expert parallelism]).
inline bool expert_sharded(const nn::Param& p) { return p.value_on("ep").is_shard(); }

class FlatParams {
 public:
  enum class Which { Dense, Experts };
  // Moves the (initialised) parameters of `model` into the flat buffers: the dense ones (summed
  // over every data axis), or the experts sharded over ep (summed over their replicas).
  FlatParams(models::Model& model, int64_t pad_multiple, Which which = Which::Dense);

  at::Tensor values;  // [padded]
  at::Tensor grads;   // [padded]
  std::vector<FlatSlot> slots;  // in buffer order
  int64_t numel = 0;            // without padding
};

}  // namespace loom::replicas
