#pragma once
// The communicator of a world of one process: every collective is the identity (or a copy),
// and point-to-point messages have no peer.
#include "loom/dist/communicator.h"

namespace loom::dist {

class NullCommunicator final : public Communicator {
 public:
  explicit NullCommunicator(std::string axis = "world") : axis_(std::move(axis)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& axis() const override { return axis_; }
  WorkPtr all_reduce_async(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkPtr all_gather_async(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_all_async(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_allv_async(const at::Tensor& input, const std::vector<int64_t>& send_counts, at::Tensor& output,
                            const std::vector<int64_t>& recv_counts) override;
  WorkPtr broadcast_async(at::Tensor& tensor, int root) override;
  WorkPtr send_async(const at::Tensor& tensor, int peer, int tag) override;
  WorkPtr recv_async(at::Tensor& tensor, int peer, int tag) override;
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;

 private:
  std::string axis_;
};

}  // namespace loom::dist

namespace loom::dist {

// Stands for a communicator of `size` ranks where only the shape matters: layers built with it
// have the parameter shards of `rank`, so a model can be sized before the mesh exists. Every
// operation throws.
class SizingCommunicator final : public Communicator {
 public:
  SizingCommunicator(int rank, int size, std::string axis) : rank_(rank), size_(size), axis_(std::move(axis)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& axis() const override { return axis_; }
  WorkPtr all_reduce_async(at::Tensor&, ReduceOp) override { refuse(); }
  WorkPtr reduce_scatter_async(const at::Tensor&, at::Tensor&, ReduceOp) override { refuse(); }
  WorkPtr all_gather_async(const at::Tensor&, at::Tensor&) override { refuse(); }
  WorkPtr all_to_all_async(const at::Tensor&, at::Tensor&) override { refuse(); }
  WorkPtr all_to_allv_async(const at::Tensor&, const std::vector<int64_t>&, at::Tensor&,
                            const std::vector<int64_t>&) override {
    refuse();
  }
  WorkPtr broadcast_async(at::Tensor&, int) override { refuse(); }
  WorkPtr send_async(const at::Tensor&, int, int) override { refuse(); }
  WorkPtr recv_async(at::Tensor&, int, int) override { refuse(); }
  void barrier() override { refuse(); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override { refuse(); }

 private:
  [[noreturn]] void refuse() const;
  int rank_, size_;
  std::string axis_;
};

}  // namespace loom::dist
