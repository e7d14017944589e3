#pragma once
// The communicator interface: collectives and point-to-point messages on libtorch tensors
// (float32, float64, bfloat16, int64; contiguous). Backends: MPI (mpi_communicator.cpp) and the
// single-process null communicator (world size 1), both on host tensors: device tensors cross them
// through HostStagingCommunicator (NOTE [Host staging]). mpi.h never appears in a public header.
//
// Contract shared by every operation:
//   - every rank of the communicator calls collectives in the same order with matching shapes;
//   - `*_async` returns a Work handle; the operation's tensors must stay untouched until wait()
//     returns (the Work keeps them alive); wait() is idempotent. Destroying an unfinished Work
//     abandons it: that only happens while an error unwinds towards ending the job;
//   - counts are in elements; reduce_scatter's input is size() blocks of output.numel() each,
//     all_gather's output is size() blocks of input.numel(), rank order.
//   - a Work that does not complete within the communicator's timeout throws loom::Error, so a
//     dead peer ends the run instead of hanging it.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace loom::dist {

enum class ReduceOp { Sum, Avg, Max };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Drives progress without blocking; true once complete. Calling it between layers is what lets
  // a bucket's all-reduce move while backward computes.
  virtual bool test() = 0;
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The axis this communicator spans ("world", "dp", "tp", ...), for errors and accounting.
  virtual const std::string& axis() const = 0;
  // Whether a helper thread may drive (test / wait) a Work while this thread runs other
  // operations (MPI: only under MPI_THREAD_MULTIPLE). A Work is never thread-safe itself: one
  // thread at a time drives it.
  virtual bool concurrent_progress() const { return true; }
  // Ranks of this job on this machine (MPI: the shared-memory split of the world, the same on
  // every communicator split from it; 1 without MPI): the default thread count per rank is the
  // cores divided by it, and this machine's memory is shared by as many.
  virtual int local_ranks() const { return 1; }
  // This rank's index among them (0 .. local_ranks() - 1): which GPU it takes (NOTE [Devices]).
  virtual int local_rank() const { return 0; }
  // Which machine this rank runs on, by the lowest world rank there: equal for the ranks of one
  // machine, different across machines (dist/topology.h).
  virtual int host() const { return 0; }

  virtual WorkPtr all_reduce_async(at::Tensor& tensor, ReduceOp op) = 0;
  virtual WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  virtual WorkPtr all_gather_async(const at::Tensor& input, at::Tensor& output) = 0;
  // Equal blocks: input and output hold size() blocks of numel() / size() elements.
  virtual WorkPtr all_to_all_async(const at::Tensor& input, at::Tensor& output) = 0;
  // Block r of input (send_counts[r] elements) goes to rank r; block r of output comes from it.
  virtual WorkPtr all_to_allv_async(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                    at::Tensor& output, const std::vector<int64_t>& recv_counts) = 0;
  virtual WorkPtr broadcast_async(at::Tensor& tensor, int root) = 0;
  virtual WorkPtr send_async(const at::Tensor& tensor, int peer, int tag) = 0;
  virtual WorkPtr recv_async(at::Tensor& tensor, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // Collective over this communicator: ranks with the same color form a new communicator,
  // ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) = 0;

  // Blocking forms. A backend may run them with its fastest blocking algorithm (MPI's tuned
  // collectives beat its non-blocking ones by 1.3-1.5x here); a time-out still ends the job.
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) { all_reduce_async(tensor, op)->wait(); }
  virtual void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(input, output, op)->wait();
  }
  virtual void all_gather(const at::Tensor& input, at::Tensor& output) { all_gather_async(input, output)->wait(); }
  virtual void broadcast(at::Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void all_to_all(const at::Tensor& input, at::Tensor& output) { all_to_all_async(input, output)->wait(); }
  void all_to_allv(const at::Tensor& input, const std::vector<int64_t>& send_counts, at::Tensor& output,
                   const std::vector<int64_t>& recv_counts) {
    all_to_allv_async(input, send_counts, output, recv_counts)->wait();
  }
  void send(const at::Tensor& tensor, int peer, int tag = 0) { send_async(tensor, peer, tag)->wait(); }
  void recv(at::Tensor& tensor, int peer, int tag = 0) { recv_async(tensor, peer, tag)->wait(); }
};

// A finished Work: what single-process and zero-size operations return.
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// Checks shared by the backends (contiguity, dtypes, block sizes); throws loom::Error.
namespace detail {
void check_tensor(const at::Tensor& t, const char* op, const std::string& axis);
void check_blocks(int64_t whole, int64_t block, int size, const char* op, const std::string& axis);
}  // namespace detail

}  // namespace loom::dist
