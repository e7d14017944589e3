// All-reduce bandwidth of loom's communicator against a plain MPI_Allreduce loop on the same
// buffers, in the same run. Run under MPI (bench/run.sh allreduce does it); rank 0 prints one
// JSON line per size with algorithm bandwidth (bytes / time) and bus bandwidth
// (algbw * 2(n-1)/n, the traffic each link carries in a ring), median over repeats.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loom/mpi/runtime.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `repeats` runs of `op`, a barrier before each. The count is the same on every rank (a
// collective loop must not depend on each rank's clock).
template <class Op>
double median_seconds(const Op& op, int repeats) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) op();  // warm-up
  std::vector<double> times;
  while (static_cast<int>(times.size()) < repeats) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    op();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  // Every rank must report the same figure: take the slowest rank's median.
  double m = median(times);
  MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

}  // namespace

// Arguments: the smallest and largest message in bytes (1 KiB and 64 MiB), sizes a factor 4 apart.
int main(int argc, char** argv) {
  const int64_t smallest = argc > 1 ? std::atoll(argv[1]) : int64_t{1} << 10;
  const int64_t largest = argc > 2 ? std::atoll(argv[2]) : int64_t{64} << 20;
  loom::dist::Runtime runtime;
  auto& world = runtime.world();
  const int n = world.size();
  for (int64_t bytes = smallest; bytes <= largest; bytes *= 4) {
    const int64_t count = bytes / 4;
    at::Tensor buffer = at::ones({count}, at::kFloat);
    const int repeats = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 10, 400));
    const double loom_s = median_seconds([&] { world.all_reduce(buffer, loom::dist::ReduceOp::Sum); }, repeats);
    // The non-blocking form, as gradient buckets run it.
    const double loom_async_s =
        median_seconds([&] { world.all_reduce_async(buffer, loom::dist::ReduceOp::Sum)->wait(); }, repeats);
    const double mpi_s = median_seconds(
        [&] {
          MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr<float>(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        },
        repeats);
    const double mpi_nb_s = median_seconds(
        [&] {
          MPI_Request req;
          MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr<float>(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD, &req);
          MPI_Wait(&req, MPI_STATUS_IGNORE);
        },
        repeats);
    const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    if (world.rank() == 0) {
      std::printf("%s\n", nlohmann::json{{"bench", "allreduce"}, {"ranks", n}, {"bytes", bytes},
                                         {"loom_algbw_GBps", bytes / loom_s / 1e9}, {"loom_busbw_GBps", bytes / loom_s / 1e9 * bus},
                                         {"loom_async_busbw_GBps", bytes / loom_async_s / 1e9 * bus},
                                         {"mpi_algbw_GBps", bytes / mpi_s / 1e9}, {"mpi_busbw_GBps", bytes / mpi_s / 1e9 * bus},
                                         {"mpi_iallreduce_algbw_GBps", bytes / mpi_nb_s / 1e9}, {"ratio_vs_mpi", mpi_s / loom_s}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
