#pragma once
// NOTE [BLAS kernel]: OpenBLAS chooses its GEMM kernels from the CPU's model number when the
// library loads. On a CPU model it does not know (e.g. a newer Xeon) it falls back to its most
// generic x86-64 kernel ("Prescott", SSE3) even when the CPU has AVX-512: on this project's
// machines that ran float32 GEMMs at about a quarter of the AVX-512 kernel's speed (24 against
// 85-145 GFLOP/s at n = 1024, one core, 2026-11-30) and made every float32 step ~3x slower.
// OpenBLAS reads OPENBLAS_CORETYPE only while loading, so before anything else (MPI included)
// loom checks the kernel it got and, when it is that generic fallback on a CPU with AVX-512 (or
// AVX2), executes itself once more with OPENBLAS_CORETYPE naming the matching kernel (SkylakeX,
// Haswell). A user's own OPENBLAS_CORETYPE is never overridden; LOOM_BLAS_AUTO=0 turns this off.
// Without OpenBLAS (another BLAS behind libtorch) nothing happens. The CLI and the test programs
// call it first thing in main.
namespace loom {

// Returns only when no re-execution is needed (or it failed: the run then goes on as it is).
void select_blas_kernel(char** argv);

}  // namespace loom
