#pragma once
// What the environment says about how this process was started, with or without the MPI backend
// built in (runtime.cpp, runtime_none.cpp): no MPI call here.
namespace loom::dist {

// The variable that shows an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK), or null.
const char* launcher_variable();

// srun without an MPI plugin (`--mpi=none`, a cluster whose MpiDefault is none) starts its tasks
// with no PMI: each would run alone as rank 0 of 1, and all of them would write the same outputs.
// InputError when this process is one of several such tasks.
void check_srun_has_pmi();

}  // namespace loom::dist
