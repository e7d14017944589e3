#pragma once
// The MPI backend's own declarations, shared by its communicators (mpi_communicator.cpp) and the
// Runtime (runtime.cpp); mpi.h stays out of every header outside mpi/.
// The C API only: the deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <memory>
#include <string>

#include "loom/core/error.h"
#include "loom/dist/communicator.h"
#include "loom/mpi/thread_sanitizer.h"
#include "loom/mpi/watchdog.h"

namespace loom::dist {

// MPI's text for an error code.
std::string mpi_error(int code);

// An MPI call, its accesses MPI's own (NOTE [MPI under ThreadSanitizer]), its error named.
#define LOOM_MPI(call, what)                                                                      \
  do {                                                                                            \
    int loom_mpi_rc = MPI_SUCCESS;                                                                \
    {                                                                                             \
      const detail::MpiOwnAccesses loom_mpi_own;                                                  \
      loom_mpi_rc = (call);                                                                       \
    }                                                                                             \
    LOOM_CHECK(loom_mpi_rc == MPI_SUCCESS, "[dist] {} failed: {}", what, mpi_error(loom_mpi_rc)); \
  } while (false)

// Owned by the Runtime, created after MPI_Init and released before MPI_Finalize; the world and
// every communicator split from it hold a pointer, so nothing here is process-wide.
struct MpiShared {
  MpiShared(double timeout_s, int rank, int node_ranks, int node_rank, int node, bool multiple);
  ~MpiShared();
  MpiShared(const MpiShared&) = delete;
  MpiShared& operator=(const MpiShared&) = delete;

  MPI_Datatype type_of(const at::Tensor& t) const {
    switch (t.scalar_type()) {
      case at::kFloat: return MPI_FLOAT;
      case at::kDouble: return MPI_DOUBLE;
      case at::kLong: return MPI_INT64_T;
      default: return bf16;
    }
  }
  MPI_Op op_of(const at::Tensor& t, ReduceOp op) const {
    const bool is_bf16 = t.scalar_type() == at::kBFloat16;
    if (op == ReduceOp::Max) return is_bf16 ? bf16_max_op : MPI_MAX;
    return is_bf16 ? bf16_sum_op : MPI_SUM;
  }

  bool thread_multiple;  // whether MPI granted MPI_THREAD_MULTIPLE
  int local_ranks;       // ranks of the job on this machine
  int local_rank;        // this rank's index among them
  int host;              // the lowest world rank on this machine
  // bfloat16 travels as two bytes with user-defined reductions.
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_op = MPI_OP_NULL, bf16_max_op = MPI_OP_NULL;
  std::unique_ptr<detail::Watchdog> watchdog;  // NOTE [Watchdog]
};

// The communicator over every rank of the job (MPI_COMM_WORLD); `shared` outlives it and every
// communicator split from it.
std::unique_ptr<Communicator> mpi_world(double timeout_s, const MpiShared* shared);

}  // namespace loom::dist
