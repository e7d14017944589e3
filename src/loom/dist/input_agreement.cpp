#include "loom/dist/input_agreement.h"

namespace loom::dist {

void agree_on_input(Communicator& world, std::exception_ptr failure) {
  const int rank = world.rank(), size = world.size();
  // Max over (size - rank) of the failing ranks picks the lowest one; 0 means none failed.
  at::Tensor vote = at::full({1}, static_cast<int64_t>(failure ? size - rank : 0), at::kLong);
  world.all_reduce(vote, ReduceOp::Max);
  const int64_t first = vote.item<int64_t>();
  if (first == 0) return;
  if (size - first == rank) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      throw AgreedInputError(e.what());
    }
  }
  throw SilentInputError(fmt::format("input refused on rank {}", size - first));
}

}  // namespace loom::dist
