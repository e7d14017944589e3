#pragma once
// Process start-up for distributed runs. When loom is started by an MPI launcher (mpirun,
// mpiexec, Slurm's srun with PMI/PMIx) it initialises MPI and the world communicator spans all
// ranks; started plainly it is a world of one with the null communicator, and MPI is never
// touched. A Slurm step of several tasks without PMI (srun --mpi=none) is refused (InputError):
// its tasks would each run alone. Only the CLI (and test mains) construct a Runtime.
//
// The MPI backend (mpi/, its own library, linked by api/ alone): everything else sees only the
// Communicator interface of dist/, so the planner, the models and the trainer build and test
// without MPI (loom_plan_tests; tests/unit/without_mpi.sh). The names stay in loom::dist, the
// interface's namespace: a program's code reads dist::Runtime beside dist::Communicator.
#include <memory>

#include "loom/dist/communicator.h"
#include "loom/dist/device_backend.h"
#include "loom/dist/interrupt.h"

namespace loom::dist {

// True when the environment shows an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool launched_by_mpi();

// What every MPI communicator of the job shares (thread level, ranks on this machine, the
// bfloat16 datatype and reductions, the watchdog): defined by the MPI backend, which keeps mpi.h
// out of this header.
struct MpiShared;
namespace detail {
class Heartbeat;  // NOTE [Heartbeat]
}

class Runtime {
 public:
  // `timeout_s`: how long a pending operation may wait before the run is declared stuck;
  // `heartbeat_s`: how long a host may stay silent before it is declared lost (NOTE [Heartbeat];
  // 0: no heartbeat).
  explicit Runtime(double timeout_s = 300, double heartbeat_s = 10);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Communicator& world() { return *world_; }
  bool distributed() const { return mpi_; }
  // Ends every rank of the job with `code` (MPI_Abort); in a world of one it returns, and the
  // caller exits as usual.
  void abort_all(int code);
  // SIGINT / SIGTERM for the lifetime of the runtime (NOTE [Interrupts]).
  InterruptHandler& interrupts() { return *interrupts_; }
  // The backend for GPU tensors the program's trainers use (NOTE [NCCL backend]): set by the
  // program's main (api/program.cpp), which links it; null: none.
  const DeviceBackend* device_backend() const { return device_backend_.get(); }
  void set_device_backend(std::unique_ptr<DeviceBackend> backend) { device_backend_ = std::move(backend); }

 private:
  bool mpi_ = false;
  // The job's MPI state, watchdog included (null without MPI): the world and every communicator
  // split from it point here, so it outlives them and is released just before MPI_Finalize.
  std::unique_ptr<MpiShared> shared_;
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<InterruptHandler> interrupts_;
  std::unique_ptr<detail::Heartbeat> heartbeat_;  // null: one host, or none asked for
  std::unique_ptr<DeviceBackend> device_backend_;
};

}  // namespace loom::dist
