#include "loom/dist/recording_communicator.h"

#include <algorithm>
#include <numeric>

namespace loom::dist {
namespace {
int64_t bytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }
}  // namespace

std::map<std::string, int64_t> CommStats::bytes_by_axis() const {
  std::map<std::string, int64_t> out;
  for (const auto& r : records) out[r.axis] += r.bytes;
  return out;
}

int64_t CommStats::count(const std::string& op, const std::string& axis) const {
  return std::count_if(records.begin(), records.end(), [&](const CommRecord& r) { return r.op == op && r.axis == axis; });
}

WorkPtr RecordingCommunicator::all_reduce_async(at::Tensor& t, ReduceOp op) {
  record("all_reduce", bytes_of(t));
  return inner_->all_reduce_async(t, op);
}
WorkPtr RecordingCommunicator::reduce_scatter_async(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  record("reduce_scatter", bytes_of(in));
  return inner_->reduce_scatter_async(in, out, op);
}
WorkPtr RecordingCommunicator::all_gather_async(const at::Tensor& in, at::Tensor& out) {
  record("all_gather", bytes_of(in));
  return inner_->all_gather_async(in, out);
}
WorkPtr RecordingCommunicator::all_to_all_async(const at::Tensor& in, at::Tensor& out) {
  record("all_to_all", bytes_of(in));
  return inner_->all_to_all_async(in, out);
}
WorkPtr RecordingCommunicator::all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts,
                                                 at::Tensor& out, const std::vector<int64_t>& recv_counts) {
  record("all_to_allv", std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}) *
                            static_cast<int64_t>(in.element_size()));
  return inner_->all_to_allv_async(in, send_counts, out, recv_counts);
}
WorkPtr RecordingCommunicator::broadcast_async(at::Tensor& t, int root) {
  record("broadcast", bytes_of(t));
  return inner_->broadcast_async(t, root);
}
WorkPtr RecordingCommunicator::send_async(const at::Tensor& t, int peer, int tag) {
  record("send", bytes_of(t));
  return inner_->send_async(t, peer, tag);
}
WorkPtr RecordingCommunicator::recv_async(at::Tensor& t, int peer, int tag) {
  record("recv", bytes_of(t));
  return inner_->recv_async(t, peer, tag);
}
void RecordingCommunicator::barrier() {
  record("barrier", 0);
  inner_->barrier();
}
void RecordingCommunicator::all_reduce(at::Tensor& t, ReduceOp op) {
  record("all_reduce", bytes_of(t));
  inner_->all_reduce(t, op);
}
void RecordingCommunicator::reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  record("reduce_scatter", bytes_of(in));
  inner_->reduce_scatter(in, out, op);
}
void RecordingCommunicator::all_gather(const at::Tensor& in, at::Tensor& out) {
  record("all_gather", bytes_of(in));
  inner_->all_gather(in, out);
}
void RecordingCommunicator::broadcast(at::Tensor& t, int root) {
  record("broadcast", bytes_of(t));
  inner_->broadcast(t, root);
}
std::unique_ptr<Communicator> RecordingCommunicator::split(int color, int key, const std::string& axis) {
  return std::make_unique<RecordingCommunicator>(inner_->split(color, key, axis), stats_);
}

}  // namespace loom::dist
