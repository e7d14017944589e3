// Process start-up (runtime.h): MPI initialised under a launcher, else a world of one.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "loom/dist/null_communicator.h"
#include "loom/mpi/heartbeat.h"
#include "loom/mpi/launcher.h"
#include "loom/mpi/mpi_shared.h"
#include "loom/mpi/runtime.h"

namespace loom::dist {

namespace {
// The other ranks on this machine and their processes (NOTE [Interrupts]).
std::vector<LocalPeer> local_peers(MPI_Comm node, int rank) {
  int size = 0;
  MPI_Comm_size(node, &size);
  const long long mine[2] = {rank, static_cast<long long>(::getpid())};
  std::vector<long long> all(2 * static_cast<size_t>(size));
  MPI_Allgather(mine, 2, MPI_LONG_LONG, all.data(), 2, MPI_LONG_LONG, node);
  std::vector<LocalPeer> peers;
  for (int i = 0; i < size; ++i)
    if (all[2 * i] != rank) peers.push_back({static_cast<int>(all[2 * i]), static_cast<pid_t>(all[2 * i + 1])});
  return peers;
}

// The heartbeat between the job's hosts, or null (one host, none asked for, no MPI_THREAD_MULTIPLE).
// Collective over the world (NOTE [Heartbeat]); `node`: this machine's ranks. Every rank decides
// alike: on rank 0's limit (a launcher may not pass the environment on to every host) and the
// lowest thread level any rank got.
std::unique_ptr<detail::Heartbeat> start_heartbeat(MPI_Comm node, int rank, int host, double heartbeat_s, bool multiple,
                                                   InterruptHandler& interrupts) {
  int size = 0, all_multiple = multiple ? 1 : 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> host_of(size);
  MPI_Allgather(&host, 1, MPI_INT, host_of.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Bcast(&heartbeat_s, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &all_multiple, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (detail::Heartbeat::wanted(host_of, heartbeat_s, all_multiple != 0))
    return std::make_unique<detail::Heartbeat>(node, std::move(host_of), heartbeat_s, interrupts);
  if (rank == 0 && heartbeat_s > 0 && detail::Heartbeat::wanted(host_of, heartbeat_s, true)) {
    std::fprintf(stderr, "loom: warning: MPI gave no MPI_THREAD_MULTIPLE, so the hosts run no heartbeat (NOTE "
                         "[Heartbeat]): a lost host ends the run only at LOOM_COMM_TIMEOUT_S\n");
  }
  return nullptr;
}

}  // namespace

Runtime::Runtime(double timeout_s, double heartbeat_s) : interrupts_(std::make_unique<InterruptHandler>()) {
  if (!launched_by_mpi()) {
    check_srun_has_pmi();
    world_ = std::make_unique<NullCommunicator>();
    return;
  }
  int provided = 0;
  LOOM_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  mpi_ = true;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Ranks sharing this machine, whatever the launcher (mpirun, srun with PMI/PMIx).
  int local_ranks = 1, local_rank = 0, host = 0;  // without the split: one machine, as local_ranks says
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &local_ranks);
    MPI_Comm_rank(node, &local_rank);
    MPI_Allreduce(&rank, &host, 1, MPI_INT, MPI_MIN, node);
    interrupts_->watch_local_peers(rank, local_peers(node, rank));
  }
  const bool multiple = provided >= MPI_THREAD_MULTIPLE;
  if (node != MPI_COMM_NULL) {
    heartbeat_ = start_heartbeat(node, rank, host, heartbeat_s, multiple, *interrupts_);
    MPI_Comm_free(&node);
  }
  shared_ = std::make_unique<MpiShared>(timeout_s, rank, local_ranks, local_rank, host, multiple);
  world_ = mpi_world(timeout_s, shared_.get());
}

Runtime::~Runtime() {
  heartbeat_.reset();  // the goodbyes, while every communicator still stands
  world_.reset();
  if (!mpi_) return;
  shared_.reset();  // stops the watchdog, frees the bfloat16 type and reductions
  const detail::MpiOwnAccesses own;
  MPI_Finalize();
}

void Runtime::abort_all(int code) {
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace loom::dist
