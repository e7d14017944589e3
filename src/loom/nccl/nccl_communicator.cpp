// The NCCL backend (NOTE [NCCL backend]).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <numeric>
#include <cstring>
#include <optional>
#include <thread>

#include "loom/core/error.h"
#include "loom/dist/host_staging.h"
#include "loom/nccl/backend.h"
#include "loom/nccl/library.h"

namespace loom::nccl {
namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("CUDA: {} failed: {}", what, cudaGetErrorString(rc)));
}

ncclDataType_t type_of(const at::Tensor& t, const std::string& axis) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kLong: return ncclInt64;
    default:
      throw Error(fmt::format("[{}] NCCL carries float32, float64, bfloat16 and int64 tensors, not {}", axis,
                              c10::toString(t.scalar_type())));
  }
}

ncclRedOp_t op_of(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::Sum: return ncclSum;
    case dist::ReduceOp::Avg: return ncclAvg;
    case dist::ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// One NCCL communicator, its stream and what its operations share. Destroyed after the last Work
// of it (each holds it), so an abandoned Work never outlives its communicator.
struct Channel {
  Library lib;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int gpu = 0;
  double timeout_s = 300;
  std::string axis;
  bool aborted = false;

  // Destroying a communicator waits for its pending work; while an error unwinds, a peer may
  // never finish that work, so the communicator is aborted instead.
  ~Channel() {
    if (comm != nullptr) std::uncaught_exceptions() > 0 ? lib.comm_abort(comm) : lib.comm_destroy(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  // Throws unless the communicator is usable (an aborted one is not).
  void check_usable(const char* what) const {
    if (aborted) throw Error(fmt::format("[{}] NCCL {} after the communicator was aborted by an earlier failure", axis, what));
  }
  // Ends the communicator's pending operations (NCCL's abort, once) and throws `why`.
  [[noreturn]] void fail(const std::string& why) {
    if (!aborted) {
      lib.comm_abort(comm);
      comm = nullptr;
      aborted = true;
    }
    throw Error(fmt::format("[{}] {}", axis, why));
  }
};

class NcclWork final : public dist::Work {
 public:
  NcclWork(std::shared_ptr<Channel> channel, cudaEvent_t done, std::vector<at::Tensor> keep, const char* what)
      : channel_(std::move(channel)), done_(done), keep_(std::move(keep)), what_(what) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  bool test() override {
    if (finished_) return true;
    const cudaError_t rc = cudaEventQuery(done_);
    if (rc == cudaErrorNotReady) return check_peers(), false;
    check_cuda(rc, what_);
    // The compute stream's later kernels follow the collective (they read or overwrite its tensors).
    // The default stream is the current device's: a helper thread driving this Work names it first.
    check_cuda(cudaSetDevice(channel_->gpu), "cudaSetDevice");
    check_cuda(cudaStreamWaitEvent(nullptr, done_, 0), "ordering the compute stream after a collective");
    finished_ = true;
    keep_.clear();
    return true;
  }
  void wait() override {
    while (!test()) {
      if (Clock::now() - start_ > std::chrono::duration<double>(channel_->timeout_s))
        channel_->fail(fmt::format("NCCL {} did not complete within {:g} s: a peer stopped or is stuck; hint: "
                                   "LOOM_COMM_TIMEOUT_S sets the limit",
                                   what_, channel_->timeout_s));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  void check_peers() {
    channel_->check_usable(what_);
    ncclResult_t async = ncclSuccess;
    channel_->lib.check(channel_->lib.comm_get_async_error(channel_->comm, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress)
      channel_->fail(fmt::format("NCCL {} failed: {}", what_, channel_->lib.get_error_string(async)));
  }
  std::shared_ptr<Channel> channel_;
  cudaEvent_t done_;
  std::vector<at::Tensor> keep_;  // the operation's tensors, alive until it completes
  const char* what_;
  Clock::time_point start_ = Clock::now();
  bool finished_ = false;
};

class NcclCommunicator final : public dist::Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Channel> channel, dist::Communicator& host, std::unique_ptr<dist::Communicator> owned)
      : channel_(std::move(channel)), owned_(std::move(owned)), host_(&host), staged_(host) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& axis() const override { return host_->axis(); }
  // CUDA events may be queried from any thread; the host twin's messages follow its own rule.
  bool concurrent_progress() const override { return host_->concurrent_progress(); }
  int local_ranks() const override { return host_->local_ranks(); }
  int local_rank() const override { return host_->local_rank(); }
  int host() const override { return host_->host(); }

  dist::WorkPtr all_reduce_async(at::Tensor& t, dist::ReduceOp op) override {
    if (t.is_cpu()) return host_->all_reduce_async(t, op);
    return launch("all_reduce", {t}, [&](const Library& l, ncclComm_t c, cudaStream_t s) {
      return l.all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), type_of(t, axis()), op_of(op), c, s);
    });
  }
  dist::WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, dist::ReduceOp op) override {
    if (in.is_cpu()) return host_->reduce_scatter_async(in, out, op);
    dist::detail::check_blocks(in.numel(), out.numel(), size(), "reduce_scatter", axis());
    return launch("reduce_scatter", {in, out}, [&](const Library& l, ncclComm_t c, cudaStream_t s) {
      return l.reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), type_of(in, axis()), op_of(op), c, s);
    });
  }
  dist::WorkPtr all_gather_async(const at::Tensor& in, at::Tensor& out) override {
    if (in.is_cpu()) return host_->all_gather_async(in, out);
    dist::detail::check_blocks(out.numel(), in.numel(), size(), "all_gather", axis());
    return launch("all_gather", {in, out}, [&](const Library& l, ncclComm_t c, cudaStream_t s) {
      return l.all_gather(in.data_ptr(), out.data_ptr(), in.numel(), type_of(in, axis()), c, s);
    });
  }
  dist::WorkPtr all_to_all_async(const at::Tensor& in, at::Tensor& out) override {
    if (in.is_cpu()) return host_->all_to_all_async(in, out);
    const int64_t block = in.numel() / size();
    dist::detail::check_blocks(in.numel(), block, size(), "all_to_all", axis());
    dist::detail::check_blocks(out.numel(), block, size(), "all_to_all", axis());
    return all_to_allv_async(in, std::vector<int64_t>(size(), block), out, std::vector<int64_t>(size(), block));
  }
  dist::WorkPtr all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor& out,
                                  const std::vector<int64_t>& recv_counts) override;
  dist::WorkPtr broadcast_async(at::Tensor& t, int root) override {
    if (t.is_cpu()) return host_->broadcast_async(t, root);
    return launch("broadcast", {t}, [&](const Library& l, ncclComm_t c, cudaStream_t s) {
      return l.broadcast(t.data_ptr(), t.data_ptr(), t.numel(), type_of(t, axis()), root, c, s);
    });
  }
  // Tagged messages cross on the host twin (NOTE [NCCL backend]).
  dist::WorkPtr send_async(const at::Tensor& t, int peer, int tag) override { return staged_.send_async(t, peer, tag); }
  dist::WorkPtr recv_async(at::Tensor& t, int peer, int tag) override { return staged_.recv_async(t, peer, tag); }
  // An all-reduce of one element, waited for with the Work's timeout (a dead peer ends it).
  void barrier() override {
    at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, channel_->gpu));
    all_reduce_async(token, dist::ReduceOp::Sum)->wait();
  }
  // The blocking forms: host tensors take the host twin's blocking algorithms.
  void all_reduce(at::Tensor& t, dist::ReduceOp op = dist::ReduceOp::Sum) override {
    if (t.is_cpu()) return host_->all_reduce(t, op);
    all_reduce_async(t, op)->wait();
  }
  void reduce_scatter(const at::Tensor& in, at::Tensor& out, dist::ReduceOp op = dist::ReduceOp::Sum) override {
    if (in.is_cpu()) return host_->reduce_scatter(in, out, op);
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(const at::Tensor& in, at::Tensor& out) override {
    if (in.is_cpu()) return host_->all_gather(in, out);
    all_gather_async(in, out)->wait();
  }
  void broadcast(at::Tensor& t, int root) override {
    if (t.is_cpu()) return host_->broadcast(t, root);
    broadcast_async(t, root)->wait();
  }
  std::unique_ptr<dist::Communicator> split(int color, int key, const std::string& axis) override;

 private:
  // Enqueues one NCCL operation on the channel's stream, after the compute stream's work so far.
  // Its tensors: defined, contiguous, on the channel's GPU, of one type.
  template <class Enqueue>
  dist::WorkPtr launch(const char* what, std::vector<at::Tensor> keep, Enqueue&& enqueue) {
    for (const at::Tensor& t : keep)
      LOOM_CHECK(t.defined() && t.is_cuda() && t.is_contiguous() && t.device().index() == channel_->gpu &&
                     t.scalar_type() == keep.front().scalar_type(),
                 "[dist] NCCL {} on '{}' needs defined, contiguous tensors of one type on cuda:{}", what, axis(),
                 channel_->gpu);
    Channel& ch = *channel_;
    ch.check_usable(what);
    check_cuda(cudaSetDevice(ch.gpu), "cudaSetDevice");
    cudaEvent_t ready = nullptr, done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(ready, nullptr), "recording the compute stream");
    check_cuda(cudaStreamWaitEvent(ch.stream, ready, 0), "ordering the NCCL stream");
    cudaEventDestroy(ready);  // released once the wait it feeds has happened
    ch.lib.check(enqueue(ch.lib, ch.comm, ch.stream), fmt::format("{} on {}", what, axis()));
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done, ch.stream), "recording the NCCL stream");
    return std::make_unique<NcclWork>(channel_, done, std::move(keep), what);
  }

  std::shared_ptr<Channel> channel_;
  std::unique_ptr<dist::Communicator> owned_;  // a split's host twin (the world's is the caller's)
  dist::Communicator* host_;
  dist::HostStagingCommunicator staged_;
};

dist::WorkPtr NcclCommunicator::all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts,
                                                  at::Tensor& out, const std::vector<int64_t>& recv_counts) {
  if (in.is_cpu()) return host_->all_to_allv_async(in, send_counts, out, recv_counts);
  const auto ranks = static_cast<size_t>(size());
  LOOM_CHECK(send_counts.size() == ranks && recv_counts.size() == ranks,
             "[dist] all_to_allv on '{}': need {} send and receive counts, got {} and {}", axis(), ranks,
             send_counts.size(), recv_counts.size());
  const int64_t sends = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  const int64_t receives = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  LOOM_CHECK(sends <= in.numel() && receives <= out.numel(),
             "[dist] all_to_allv on '{}': counts sum to {} sent / {} received, buffers hold {} / {}", axis(), sends,
             receives, in.numel(), out.numel());
  const auto bytes = static_cast<int64_t>(in.element_size());
  return launch("all_to_allv", {in, out}, [&](const Library& l, ncclComm_t c, cudaStream_t s) {
    const ncclDataType_t type = type_of(in, axis());
    l.check(l.group_start(), "ncclGroupStart");
    int64_t sent = 0, received = 0;
    ncclResult_t rc = ncclSuccess;
    for (int peer = 0; peer < size() && rc == ncclSuccess; ++peer) {
      rc = l.send(static_cast<const char*>(in.data_ptr()) + sent * bytes, send_counts[peer], type, peer, c, s);
      if (rc == ncclSuccess)
        rc = l.recv(static_cast<char*>(out.data_ptr()) + received * bytes, recv_counts[peer], type, peer, c, s);
      sent += send_counts[peer], received += recv_counts[peer];
    }
    const ncclResult_t ended = l.group_end();
    return rc != ncclSuccess ? rc : ended;
  });
}

std::unique_ptr<dist::Communicator> NcclCommunicator::split(int color, int key, const std::string& axis) {
  channel_->check_usable("split");
  std::unique_ptr<dist::Communicator> host = host_->split(color, key, axis);
  auto sub = std::make_shared<Channel>();  // the library, GPU and timeout; a comm and stream of its own
  sub->lib = channel_->lib, sub->gpu = channel_->gpu, sub->timeout_s = channel_->timeout_s, sub->axis = axis;
  channel_->lib.check(channel_->lib.comm_split(channel_->comm, color, key, &sub->comm, nullptr),
                      "ncclCommSplit for axis " + axis);
  check_cuda(cudaSetDevice(sub->gpu), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&sub->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  dist::Communicator& twin = *host;
  return std::make_unique<NcclCommunicator>(std::move(sub), twin, std::move(host));
}

class Backend final : public dist::DeviceBackend {
 public:
  explicit Backend(double timeout_s) : timeout_s_(timeout_s) {}
  std::string missing() const override { return library().missing; }
  std::unique_ptr<dist::Communicator> connect(dist::Communicator& host, int gpu) const override;

 private:
  const Library& library() const {  // loaded on first use: a CPU run never loads libnccl
    if (!lib_) lib_ = load_library();
    return *lib_;
  }
  double timeout_s_;
  mutable std::optional<Library> lib_;
};

std::unique_ptr<dist::Communicator> Backend::connect(dist::Communicator& host, int gpu) const {
  const Library& lib = library();
  if (!lib.missing.empty()) throw Error("the NCCL backend: " + lib.missing);
  check_cuda(cudaSetDevice(gpu), "cudaSetDevice");
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
  at::Tensor id = at::zeros({static_cast<int64_t>(sizeof(ncclUniqueId) / sizeof(int64_t))}, at::kLong);
  ncclUniqueId unique{};
  if (host.rank() == 0) {
    lib.check(lib.get_unique_id(&unique), "ncclGetUniqueId");
    std::memcpy(id.data_ptr(), &unique, sizeof(unique));
  }
  host.broadcast(id, 0);
  std::memcpy(&unique, id.data_ptr(), sizeof(unique));
  auto channel = std::make_shared<Channel>();
  channel->lib = lib, channel->gpu = gpu, channel->timeout_s = timeout_s_, channel->axis = host.axis();
  lib.check(lib.comm_init_rank(&channel->comm, host.size(), unique, host.rank()),
            fmt::format("ncclCommInitRank (rank {} of {}, GPU {})", host.rank(), host.size(), gpu));
  check_cuda(cudaStreamCreateWithFlags(&channel->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return std::make_unique<NcclCommunicator>(std::move(channel), host, nullptr);
}

}  // namespace

std::unique_ptr<dist::DeviceBackend> make_backend(double timeout_s) { return std::make_unique<Backend>(timeout_s); }

}  // namespace loom::nccl
