#pragma once
// A communicator that forwards to another and records every operation: its kind, the axis it
// ran on, and the payload bytes this rank handed in (the tensor for all_reduce and broadcast,
// the input for reduce_scatter / all_gather / all-to-all, the message for send / recv). On a
// communicator of one rank nothing moves, so nothing is recorded. Tests
// assert counts and volumes against the analytic ones; the trainer reports bytes per axis.
#include <map>
#include <string>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::dist {

struct CommRecord {
  std::string op, axis;
  int64_t bytes = 0;
  bool operator==(const CommRecord&) const = default;
};

struct CommStats {
  std::vector<CommRecord> records;
  std::map<std::string, int64_t> bytes_by_axis() const;
  int64_t count(const std::string& op, const std::string& axis) const;
  void clear() { records.clear(); }
};

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, CommStats& stats)
      : owned_(std::move(inner)), inner_(owned_.get()), stats_(stats) {}
  // Records on a communicator owned elsewhere (e.g. the runtime's world).
  RecordingCommunicator(Communicator& inner, CommStats& stats) : inner_(&inner), stats_(stats) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& axis() const override { return inner_->axis(); }
  bool concurrent_progress() const override { return inner_->concurrent_progress(); }
  int local_ranks() const override { return inner_->local_ranks(); }
  int local_rank() const override { return inner_->local_rank(); }
  int host() const override { return inner_->host(); }
  WorkPtr all_reduce_async(at::Tensor& t, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, ReduceOp op) override;
  WorkPtr all_gather_async(const at::Tensor& in, at::Tensor& out) override;
  WorkPtr all_to_all_async(const at::Tensor& in, at::Tensor& out) override;
  WorkPtr all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor& out,
                            const std::vector<int64_t>& recv_counts) override;
  WorkPtr broadcast_async(at::Tensor& t, int root) override;
  WorkPtr send_async(const at::Tensor& t, int peer, int tag) override;
  WorkPtr recv_async(at::Tensor& t, int peer, int tag) override;
  void barrier() override;
  void all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  void reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op = ReduceOp::Sum) override;
  void all_gather(const at::Tensor& in, at::Tensor& out) override;
  void broadcast(at::Tensor& t, int root) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;

 private:
  void record(const char* op, int64_t bytes) {
    if (inner_->size() > 1) stats_.records.push_back({op, inner_->axis(), bytes});
  }
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  CommStats& stats_;
};

}  // namespace loom::dist
