#include "loom/dist/host_staging.h"

namespace loom::dist {
namespace {

// The inner operation's Work, and where its host result goes once it completes (NOTE [Host staging]).
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr inner, at::Tensor host, at::Tensor target, at::Tensor keep = {})
      : inner_(std::move(inner)), host_(std::move(host)), target_(std::move(target)), keep_(std::move(keep)) {}
  void wait() override {
    inner_->wait();
    deliver();
  }
  bool test() override {
    if (!inner_->test()) return false;
    deliver();
    return true;
  }

 private:
  void deliver() {
    if (target_.defined() && !target_.is_same(host_)) target_.copy_(host_);
    target_.reset();  // delivered once: wait() stays idempotent
    keep_.reset();
  }
  WorkPtr inner_;
  at::Tensor host_, target_, keep_;  // keep_: a staged input, alive until the operation is done
};

WorkPtr staged_work(WorkPtr inner, const at::Tensor& host, const at::Tensor& target, const at::Tensor& keep = {}) {
  return std::make_unique<StagedWork>(std::move(inner), host, target, keep);
}

void deliver(const at::Tensor& host, at::Tensor& target) {
  if (!target.is_same(host)) target.copy_(host);
}

}  // namespace

at::Tensor HostStagingCommunicator::input(const at::Tensor& t) const {
  return staged(t) ? t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true) : t;
}

at::Tensor HostStagingCommunicator::output(const at::Tensor& t) const {
  return staged(t) ? at::empty(t.sizes(), t.options().device(at::kCPU)) : t;
}

WorkPtr HostStagingCommunicator::all_reduce_async(at::Tensor& t, ReduceOp op) {
  at::Tensor host = input(t);
  return staged_work(inner_->all_reduce_async(host, op), host, t);
}
WorkPtr HostStagingCommunicator::reduce_scatter_async(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  const at::Tensor host_in = input(in);
  at::Tensor host = output(out);
  return staged_work(inner_->reduce_scatter_async(host_in, host, op), host, out, host_in);
}
WorkPtr HostStagingCommunicator::all_gather_async(const at::Tensor& in, at::Tensor& out) {
  const at::Tensor host_in = input(in);
  at::Tensor host = output(out);
  return staged_work(inner_->all_gather_async(host_in, host), host, out, host_in);
}
WorkPtr HostStagingCommunicator::all_to_all_async(const at::Tensor& in, at::Tensor& out) {
  const at::Tensor host_in = input(in);
  at::Tensor host = output(out);
  return staged_work(inner_->all_to_all_async(host_in, host), host, out, host_in);
}
WorkPtr HostStagingCommunicator::all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts,
                                                   at::Tensor& out, const std::vector<int64_t>& recv_counts) {
  const at::Tensor host_in = input(in);
  at::Tensor host = output(out);
  return staged_work(inner_->all_to_allv_async(host_in, send_counts, host, recv_counts), host, out, host_in);
}
WorkPtr HostStagingCommunicator::broadcast_async(at::Tensor& t, int root) {
  at::Tensor host = input(t);
  return staged_work(inner_->broadcast_async(host, root), host, t);
}
WorkPtr HostStagingCommunicator::send_async(const at::Tensor& t, int peer, int tag) {
  const at::Tensor host = input(t);
  return staged_work(inner_->send_async(host, peer, tag), host, {}, host);
}
WorkPtr HostStagingCommunicator::recv_async(at::Tensor& t, int peer, int tag) {
  at::Tensor host = output(t);
  return staged_work(inner_->recv_async(host, peer, tag), host, t);
}

// The blocking forms keep the backend's blocking algorithms.
void HostStagingCommunicator::all_reduce(at::Tensor& t, ReduceOp op) {
  at::Tensor host = input(t);
  inner_->all_reduce(host, op);
  deliver(host, t);
}
void HostStagingCommunicator::reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  at::Tensor host = output(out);
  inner_->reduce_scatter(input(in), host, op);
  deliver(host, out);
}
void HostStagingCommunicator::all_gather(const at::Tensor& in, at::Tensor& out) {
  at::Tensor host = output(out);
  inner_->all_gather(input(in), host);
  deliver(host, out);
}
void HostStagingCommunicator::broadcast(at::Tensor& t, int root) {
  at::Tensor host = input(t);
  inner_->broadcast(host, root);
  deliver(host, t);
}

std::unique_ptr<Communicator> HostStagingCommunicator::split(int color, int key, const std::string& axis) {
  return std::make_unique<HostStagingCommunicator>(inner_->split(color, key, axis), always_);
}

}  // namespace loom::dist
