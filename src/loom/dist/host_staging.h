#pragma once
// NOTE [Host staging]
// A backend that moves host memory (MPI) can still carry device tensors: each operation copies its
// device inputs into host buffers, runs on them, and copies the outputs back into the device
// tensors when its Work completes (wait(), or the test() that finds it done). The copies are
// synchronous (the device's work on a tensor has finished once it is on the host), so the Work
// contract is unchanged: the caller's tensors are read when the operation starts and written by
// the time wait() returns. The cost: a test() that finds an operation done copies back there and
// then, so it waits for the device's queue; staging through pinned buffers on a copy stream would
// keep the overlap. Host tensors pass through untouched. It is how ranks sharing one GPU
// train together (tests, and nodes with fewer GPUs than ranks), and the path GPU ranks take until
// a device backend (NCCL) carries their tensors.
//
// `always` stages host tensors too, through copies of their own: the tests check the staging
// itself on a machine without a device.
#include "loom/dist/communicator.h"

namespace loom::dist {

class HostStagingCommunicator final : public Communicator {
 public:
  explicit HostStagingCommunicator(Communicator& inner, bool always = false) : inner_(&inner), always_(always) {}
  HostStagingCommunicator(std::unique_ptr<Communicator> inner, bool always)
      : owned_(std::move(inner)), inner_(owned_.get()), always_(always) {}
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
  void barrier() override { inner_->barrier(); }
  void all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  void reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op = ReduceOp::Sum) override;
  void all_gather(const at::Tensor& in, at::Tensor& out) override;
  void broadcast(at::Tensor& t, int root) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;

 private:
  bool staged(const at::Tensor& t) const { return always_ || !t.is_cpu(); }
  at::Tensor input(const at::Tensor& t) const;   // t, or a host copy of it
  at::Tensor output(const at::Tensor& t) const;  // t, or a host tensor of its shape and type
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  bool always_;
};

}  // namespace loom::dist
