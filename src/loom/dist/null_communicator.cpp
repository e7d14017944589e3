#include "loom/dist/null_communicator.h"

#include "loom/core/error.h"

namespace loom::dist {
namespace {
WorkPtr copy_into(const at::Tensor& input, at::Tensor& output, const char* op, const std::string& axis) {
  detail::check_tensor(input, op, axis);
  detail::check_tensor(output, op, axis);
  LOOM_CHECK(input.numel() == output.numel(), "[dist] {} on '{}': input has {} elements, output {}", op, axis,
             input.numel(), output.numel());
  if (!input.is_same(output)) output.view(-1).copy_(input.view(-1));
  return std::make_unique<DoneWork>();
}
}  // namespace

WorkPtr NullCommunicator::all_reduce_async(at::Tensor& tensor, ReduceOp) {
  detail::check_tensor(tensor, "all_reduce", axis_);
  return std::make_unique<DoneWork>();
}
WorkPtr NullCommunicator::reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp) {
  return copy_into(input, output, "reduce_scatter", axis_);
}
WorkPtr NullCommunicator::all_gather_async(const at::Tensor& input, at::Tensor& output) {
  return copy_into(input, output, "all_gather", axis_);
}
WorkPtr NullCommunicator::all_to_all_async(const at::Tensor& input, at::Tensor& output) {
  return copy_into(input, output, "all_to_all", axis_);
}
WorkPtr NullCommunicator::all_to_allv_async(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                            at::Tensor& output, const std::vector<int64_t>& recv_counts) {
  LOOM_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0] &&
                 send_counts[0] <= input.numel() && recv_counts[0] <= output.numel(),
             "[dist] all_to_allv on '{}': counts do not match a world of one", axis_);
  if (send_counts[0] > 0) output.view(-1).narrow(0, 0, recv_counts[0]).copy_(input.view(-1).narrow(0, 0, send_counts[0]));
  return std::make_unique<DoneWork>();
}
WorkPtr NullCommunicator::broadcast_async(at::Tensor& tensor, int root) {
  LOOM_CHECK(root == 0, "[dist] broadcast on '{}' from rank {} in a world of one", axis_, root);
  return std::make_unique<DoneWork>();
}
WorkPtr NullCommunicator::send_async(const at::Tensor&, int peer, int) {
  throw Error(fmt::format("[dist] send to rank {} on '{}': a world of one has no peers", peer, axis_));
}
WorkPtr NullCommunicator::recv_async(at::Tensor&, int peer, int) {
  throw Error(fmt::format("[dist] recv from rank {} on '{}': a world of one has no peers", peer, axis_));
}
std::unique_ptr<Communicator> NullCommunicator::split(int, int, const std::string& axis) {
  return std::make_unique<NullCommunicator>(axis);
}

void SizingCommunicator::refuse() const {
  throw Error(fmt::format("[dist] the sizing communicator for '{}' cannot communicate", axis_));
}

namespace detail {
void check_tensor(const at::Tensor& t, const char* op, const std::string& axis) {
  LOOM_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(),
             "[dist] {} on '{}' needs a defined, contiguous CPU tensor", op, axis);
  const auto type = t.scalar_type();
  LOOM_CHECK(type == at::kFloat || type == at::kDouble || type == at::kBFloat16 || type == at::kLong,
             "[dist] {} on '{}': dtype {} is not float32, float64, bfloat16 or int64", op, axis,
             c10::toString(type));
}
void check_blocks(int64_t whole, int64_t block, int size, const char* op, const std::string& axis) {
  LOOM_CHECK(whole == block * size, "[dist] {} on '{}': {} elements are not {} blocks of {}", op, axis, whole, size,
             block);
}
}  // namespace detail

}  // namespace loom::dist
