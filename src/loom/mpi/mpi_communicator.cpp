#include <unistd.h>
// The MPI backend. NOTE [Progress]: Open MPI moves a non-blocking collective only inside MPI
// calls, so Work::test() (an MPI_Test) is what the data-parallel reducer calls between layers to
// let its bucket all-reduces overlap backward; wait() polls with MPI_Test so that a peer that
// never arrives ends in a timeout error rather than a hang.
#include <c10/util/BFloat16.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "loom/core/error.h"
#include "loom/dist/hierarchical.h"
#include "loom/mpi/mpi_shared.h"

namespace loom::dist {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

namespace {

// The buffers an operation reads and writes, marked as MPI's accesses (NOTE [MPI under
// ThreadSanitizer]); a no-op in other builds.
struct Buffers {
  std::vector<at::Tensor> read, written;
  void mark() const {
    for (const at::Tensor& t : read) detail::mark_mpi_read(t);
    for (const at::Tensor& t : written) detail::mark_mpi_write(t);
  }
};

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const c10::BFloat16*>(in);
  auto* b = static_cast<c10::BFloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<c10::BFloat16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const c10::BFloat16*>(in);
  auto* b = static_cast<c10::BFloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<float>(a[i]) > static_cast<float>(b[i]) ? a[i] : b[i];
}

}  // namespace

MpiShared::MpiShared(double timeout_s, int rank, int node_ranks, int node_rank, int node, bool multiple)
    : thread_multiple(multiple),
      local_ranks(node_ranks),
      local_rank(node_rank),
      host(node),
      watchdog(std::make_unique<detail::Watchdog>(timeout_s, rank, multiple)) {
  MPI_Type_contiguous(2, MPI_BYTE, &bf16);
  MPI_Type_commit(&bf16);
  MPI_Op_create(&bf16_sum, 1, &bf16_sum_op);
  MPI_Op_create(&bf16_max, 1, &bf16_max_op);
}

MpiShared::~MpiShared() {
  watchdog.reset();  // its thread ends before the MPI objects go
  MPI_Op_free(&bf16_sum_op);
  MPI_Op_free(&bf16_max_op);
  MPI_Type_free(&bf16);
}

namespace {

int count_of(int64_t n, const char* op) {
  LOOM_CHECK(n >= 0 && n <= INT_MAX, "[dist] {}: {} elements exceed MPI's int count; split the buffer", op, n);
  return static_cast<int>(n);
}

class MpiWork final : public Work {
 public:
  // `buffers`: marked as MPI's accesses now, as the operation is posted, and when it completes.
  MpiWork(std::string what, double timeout_s, Buffers buffers, std::function<void()> finish = {})
      : what_(std::move(what)), timeout_s_(timeout_s), buffers_(std::move(buffers)), finish_(std::move(finish)) {
    buffers_.mark();
  }
  ~MpiWork() override {
    // Destroyed unfinished only while an error unwinds the stack, on the way to MPI_Abort: waiting
    // here could block forever (the peer may be the failure), and a collective cannot be
    // cancelled. So the request is abandoned and its buffers deliberately leaked, since MPI may
    // still write into them.
    if (done_ || (requests_[0] == MPI_REQUEST_NULL && requests_[1] == MPI_REQUEST_NULL)) return;
    int flag = 0;
    {
      const detail::MpiOwnAccesses own;
      MPI_Testall(2, requests_.data(), &flag, MPI_STATUSES_IGNORE);
    }
    if (!flag) new Buffers(std::move(buffers_));  // NOLINT: intentional leak
  }
  MPI_Request* request() { return &requests_[0]; }
  MPI_Request* second_request() { return &requests_[1]; }  // an operation of two messages
  std::vector<int>& counts() { return counts_; }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    LOOM_MPI(MPI_Testall(2, requests_.data(), &flag, MPI_STATUSES_IGNORE), what_);
    if (flag) {
      done_ = true;
      buffers_.mark();  // what MPI did to them, seen complete by this thread
      if (finish_) finish_();
      finish_ = nullptr;  // with what it holds (a pair's temporary)
      buffers_ = {};
    }
    return done_;
  }

  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    while (!test()) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      LOOM_CHECK(waited < timeout_s_,
                 "[dist] {} did not complete within {:.0f} s; a peer rank has probably failed or is stuck", what_,
                 timeout_s_);
      std::this_thread::yield();
    }
  }

 private:
  std::string what_;
  double timeout_s_;
  Buffers buffers_;  // the operation's buffers stay alive until it completes
  std::function<void()> finish_;
  std::vector<int> counts_;       // all_to_allv's counts and displacements
  std::array<MPI_Request, 2> requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, std::string axis, double timeout_s, const MpiShared* shared)
      : comm_(comm), owned_(owned), axis_(std::move(axis)), timeout_s_(timeout_s), shared_(shared) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    levels_ = host_levels(*this, shared_->host);  // NOTE [Hierarchical all-reduce]
    if (size_ == 2) LOOM_MPI(MPI_Comm_dup(comm_, &pair_), "comm dup for a pair's all-reduce");
  }
  ~MpiCommunicator() override {
    if (pair_ != MPI_COMM_NULL) MPI_Comm_free(&pair_);
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& axis() const override { return axis_; }

  WorkPtr all_reduce_async(at::Tensor& t, ReduceOp op) override {
    check_all_reduce(t, op);
    if (takes_levels(t)) return hierarchical_all_reduce_async(levels_, t, op);
    if (pair_ != MPI_COMM_NULL) return pair_all_reduce_async(t, op);
    std::function<void()> finish;
    if (op == ReduceOp::Avg) finish = [t, n = size_]() mutable { t.div_(n); };
    auto work = make("all_reduce", {.written = {t}}, std::move(finish));
    LOOM_MPI(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t.numel(), "all_reduce"), mpi_type(t),
                            mpi_op(t, op), comm_, work->request()),
             "all_reduce");
    return work;
  }

  WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, ReduceOp op) override {
    check_reduce_scatter(in, out, op);
    std::function<void()> finish;
    if (op == ReduceOp::Avg) finish = [out, n = size_]() mutable { out.div_(n); };
    auto work = make("reduce_scatter", {.read = {in}, .written = {out}}, std::move(finish));
    LOOM_MPI(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out.numel(), "reduce_scatter"),
                                       mpi_type(in), mpi_op(in, op), comm_, work->request()),
             "reduce_scatter");
    return work;
  }

  WorkPtr all_gather_async(const at::Tensor& in, at::Tensor& out) override {
    check_all_gather(in, out);
    const int n = count_of(in.numel(), "all_gather");
    auto work = make("all_gather", {.read = {in}, .written = {out}});
    LOOM_MPI(MPI_Iallgather(in.data_ptr(), n, mpi_type(in), out.data_ptr(), n, mpi_type(out), comm_, work->request()),
             "all_gather");
    return work;
  }

  WorkPtr all_to_all_async(const at::Tensor& in, at::Tensor& out) override {
    detail::check_tensor(in, "all_to_all", axis_);
    detail::check_tensor(out, "all_to_all", axis_);
    LOOM_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0,
               "[dist] all_to_all on '{}': {} and {} elements are not {} equal blocks", axis_, in.numel(), out.numel(),
               size_);
    const int n = count_of(in.numel() / size_, "all_to_all");
    auto work = make("all_to_all", {.read = {in}, .written = {out}});
    LOOM_MPI(MPI_Ialltoall(in.data_ptr(), n, mpi_type(in), out.data_ptr(), n, mpi_type(out), comm_, work->request()),
             "all_to_all");
    return work;
  }

  WorkPtr all_to_allv_async(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor& out,
                            const std::vector<int64_t>& recv_counts) override {
    detail::check_tensor(in, "all_to_allv", axis_);
    detail::check_tensor(out, "all_to_allv", axis_);
    const auto ranks = static_cast<size_t>(size_);
    LOOM_CHECK(send_counts.size() == ranks && recv_counts.size() == ranks,
               "[dist] all_to_allv on '{}': need {} send and receive counts, got {} and {}", axis_, size_,
               send_counts.size(), recv_counts.size());
    auto work = make("all_to_allv", {.read = {in}, .written = {out}});
    std::vector<int>& c = work->counts();  // [send counts | send displs | recv counts | recv displs]
    c.assign(4 * ranks, 0);
    int64_t send_total = 0, recv_total = 0;
    for (size_t r = 0; r < ranks; ++r) {
      c[r] = count_of(send_counts[r], "all_to_allv");
      c[ranks + r] = count_of(send_total, "all_to_allv");
      c[2 * ranks + r] = count_of(recv_counts[r], "all_to_allv");
      c[3 * ranks + r] = count_of(recv_total, "all_to_allv");
      send_total += send_counts[r], recv_total += recv_counts[r];
    }
    LOOM_CHECK(send_total <= in.numel() && recv_total <= out.numel(),
               "[dist] all_to_allv on '{}': counts sum to {} sent / {} received, buffers hold {} / {}", axis_,
               send_total, recv_total, in.numel(), out.numel());
    LOOM_MPI(MPI_Ialltoallv(in.data_ptr(), c.data(), c.data() + ranks, mpi_type(in), out.data_ptr(), c.data() + 2 * ranks,
                            c.data() + 3 * ranks, mpi_type(out), comm_, work->request()),
             "all_to_allv");
    return work;
  }

  WorkPtr broadcast_async(at::Tensor& t, int root) override {
    detail::check_tensor(t, "broadcast", axis_);
    LOOM_CHECK(root >= 0 && root < size_, "[dist] broadcast on '{}' from rank {} of {}", axis_, root, size_);
    auto work = make("broadcast", root == rank_ ? Buffers{.read = {t}} : Buffers{.written = {t}});
    LOOM_MPI(MPI_Ibcast(t.data_ptr(), count_of(t.numel(), "broadcast"), mpi_type(t), root, comm_, work->request()),
             "broadcast");
    return work;
  }

  WorkPtr send_async(const at::Tensor& t, int peer, int tag) override {
    detail::check_tensor(t, "send", axis_);
    check_peer(peer, "send");
    auto work = make(fmt::format("send to rank {}", peer), {.read = {t}});
    LOOM_MPI(MPI_Isend(t.data_ptr(), count_of(t.numel(), "send"), mpi_type(t), peer, tag, comm_, work->request()),
             "send");
    return work;
  }

  WorkPtr recv_async(at::Tensor& t, int peer, int tag) override {
    detail::check_tensor(t, "recv", axis_);
    check_peer(peer, "recv");
    auto work = make(fmt::format("recv from rank {}", peer), {.written = {t}});
    LOOM_MPI(MPI_Irecv(t.data_ptr(), count_of(t.numel(), "recv"), mpi_type(t), peer, tag, comm_, work->request()),
             "recv");
    return work;
  }

  void all_reduce(at::Tensor& t, ReduceOp op) override {
    check_all_reduce(t, op);
    if (takes_levels(t)) return hierarchical_all_reduce(levels_, t, op);
    {
      detail::Deadline deadline(shared_->watchdog.get(), describe("all_reduce"));
      detail::mark_mpi_write(t);
      LOOM_MPI(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t.numel(), "all_reduce"), mpi_type(t),
                             mpi_op(t, op), comm_),
               "all_reduce");
    }
    if (op == ReduceOp::Avg) t.div_(size_);
  }

  void reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) override {
    check_reduce_scatter(in, out, op);
    {
      detail::Deadline deadline(shared_->watchdog.get(), describe("reduce_scatter"));
      Buffers{.read = {in}, .written = {out}}.mark();
      LOOM_MPI(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out.numel(), "reduce_scatter"),
                                        mpi_type(in), mpi_op(in, op), comm_),
               "reduce_scatter");
    }
    if (op == ReduceOp::Avg) out.div_(size_);
  }

  void all_gather(const at::Tensor& in, at::Tensor& out) override {
    check_all_gather(in, out);
    const int n = count_of(in.numel(), "all_gather");
    detail::Deadline deadline(shared_->watchdog.get(), describe("all_gather"));
    Buffers{.read = {in}, .written = {out}}.mark();
    LOOM_MPI(MPI_Allgather(in.data_ptr(), n, mpi_type(in), out.data_ptr(), n, mpi_type(out), comm_), "all_gather");
  }

  void broadcast(at::Tensor& t, int root) override {
    detail::check_tensor(t, "broadcast", axis_);
    LOOM_CHECK(root >= 0 && root < size_, "[dist] broadcast on '{}' from rank {} of {}", axis_, root, size_);
    detail::Deadline deadline(shared_->watchdog.get(), describe("broadcast"));
    (root == rank_ ? Buffers{.read = {t}} : Buffers{.written = {t}}).mark();
    LOOM_MPI(MPI_Bcast(t.data_ptr(), count_of(t.numel(), "broadcast"), mpi_type(t), root, comm_), "broadcast");
  }

  void barrier() override {
    auto work = make("barrier", {});
    LOOM_MPI(MPI_Ibarrier(comm_, work->request()), "barrier");
    work->wait();
  }

  bool concurrent_progress() const override { return shared_->thread_multiple; }
  int local_ranks() const override { return shared_->local_ranks; }
  int local_rank() const override { return shared_->local_rank; }
  int host() const override { return shared_->host; }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override {
    MPI_Comm comm = MPI_COMM_NULL;
    LOOM_MPI(MPI_Comm_split(comm_, color, key, &comm), "comm split for axis " + axis);
    return std::make_unique<MpiCommunicator>(comm, true, axis, timeout_s_, shared_);
  }

 private:
  // Argument checks shared by the non-blocking and blocking forms.
  void check_all_reduce(const at::Tensor& t, ReduceOp op) const {
    detail::check_tensor(t, "all_reduce", axis_);
    LOOM_CHECK(op != ReduceOp::Avg || t.is_floating_point(), "[dist] all_reduce avg on '{}' needs floating point",
               axis_);
  }
  void check_reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) const {
    detail::check_tensor(in, "reduce_scatter", axis_);
    detail::check_tensor(out, "reduce_scatter", axis_);
    detail::check_blocks(in.numel(), out.numel(), size_, "reduce_scatter", axis_);
    LOOM_CHECK(op != ReduceOp::Avg || in.is_floating_point(),
               "[dist] reduce_scatter avg on '{}' needs floating point", axis_);
  }
  void check_all_gather(const at::Tensor& in, const at::Tensor& out) const {
    detail::check_tensor(in, "all_gather", axis_);
    detail::check_tensor(out, "all_gather", axis_);
    detail::check_blocks(out.numel(), in.numel(), size_, "all_gather", axis_);
  }
  // NOTE [Pair all-reduce]: a group of 2 all-reduces without blocking by exchanging the buffers and
  // combining them on each side: the buffer crosses the link once each way, both ways at once.
  // Open MPI 4.1's non-blocking all-reduce (coll/libnbc) reduces to one rank and broadcasts back in
  // groups under 4 ranks, sending the buffer one way and then the other: half the link's rate
  // (0.057 GB/s against 0.118 at 64 MiB between the test cluster's hosts, where the blocking
  // MPI_Allreduce reaches the link). Both sides add the same two numbers, so they agree bit for
  // bit, and with MPI's sum of two (one rounding); a maximum takes rank 0's operand first on both.
  // The peer's copy is a temporary the size of the buffer, on its own communicator (a duplicate),
  // so it never meets the group's own messages.
  WorkPtr pair_all_reduce_async(at::Tensor& t, ReduceOp op) {
    at::Tensor other = at::empty_like(t);
    auto finish = [t, other, op, first = rank_ == 0]() mutable {
      if (op == ReduceOp::Max) {  // rank 0's operand first on both: -0 against +0 picks alike
        at::maximum_out(t, first ? t : other, first ? other : t);
      } else {
        t.add_(other);
      }
      if (op == ReduceOp::Avg) t.div_(2);
    };
    auto work = make("all_reduce", {.read = {t}, .written = {other}}, std::move(finish));
    const int n = count_of(t.numel(), "all_reduce"), peer = 1 - rank_;
    LOOM_MPI(MPI_Irecv(other.data_ptr(), n, mpi_type(t), peer, 0, pair_, work->request()), "all_reduce");
    LOOM_MPI(MPI_Isend(t.data_ptr(), n, mpi_type(t), peer, 0, pair_, work->second_request()), "all_reduce");
    return work;
  }
  // NOTE [Hierarchical all-reduce]: a group across hosts.
  bool takes_levels(const at::Tensor& t) const {
    return levels_ && t.numel() > 0;
  }
  std::string describe(const std::string& op) const {
    return fmt::format("{} on '{}' (rank {} of {})", op, axis_, rank_, size_);
  }
  std::unique_ptr<MpiWork> make(const std::string& op, Buffers buffers, std::function<void()> finish = {}) {
    return std::make_unique<MpiWork>(describe(op), timeout_s_, std::move(buffers), std::move(finish));
  }
  MPI_Datatype mpi_type(const at::Tensor& t) const { return shared_->type_of(t); }
  MPI_Op mpi_op(const at::Tensor& t, ReduceOp op) const { return shared_->op_of(t, op); }
  void check_peer(int peer, const char* op) const {
    LOOM_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[dist] {} on '{}': peer {} is not another rank of {}",
               op, axis_, peer, size_);
  }

  MPI_Comm comm_;
  bool owned_;
  std::string axis_;
  double timeout_s_;
  const MpiShared* shared_;  // the Runtime's; outlives every communicator
  int rank_ = 0, size_ = 1;
  std::shared_ptr<HostLevels> levels_;  // null: on one host (or unevenly spread)
  MPI_Comm pair_ = MPI_COMM_NULL;        // a group of 2: its exchange (NOTE [Pair all-reduce])
};

}  // namespace

std::unique_ptr<Communicator> mpi_world(double timeout_s, const MpiShared* shared) {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false, "world", timeout_s, shared);
}

}  // namespace loom::dist
