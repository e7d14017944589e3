#pragma once
// NOTE [MPI under ThreadSanitizer]
// Open MPI orders its own memory accesses with locks and atomics that are not instrumented: its
// shared-memory transport copies a message while another thread's MPI call copies another, a
// receive is unpacked into loom's buffer by whichever thread drives progress next. ThreadSanitizer
// sees those copies and not their order, so they would be reported as races. Suppressing the
// frames of MPI's libraries would also hide every race of loom's own with them: a suppression
// matches a frame of either access, so a buffer written by one thread while another thread's send
// still reads it would pass unseen. Instead, under ThreadSanitizer:
//   - every MPI call runs with the calling thread's memory accesses ignored (MpiOwnAccesses), so
//     MPI's copies, and the reductions it runs in loom's callbacks, are not recorded at all;
//   - each operation's buffers are marked as MPI reads and writes them, in loom's own frames
//     (mpi_communicator.cpp): what it sends or reduces as read, what it receives as written, once
//     when the operation is posted (by the posting thread) and again when loom sees it complete
//     (by the thread that sees it).
// A thread that writes a buffer of a pending operation, or reads what a receive is still filling,
// without its own ordering with the completion (a join, a lock, the queue that handed the
// operation over) races with one of these marks, and the report names loom's frames: the planted
// test (tests/sanitizers/planted_race.sh) checks that it is reported. What it cannot see: accesses
// made inside libtorch's kernels, which are not instrumented either.
#include <ATen/core/Tensor.h>

#if defined(__SANITIZE_THREAD__)
extern "C" {
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
void __tsan_read_range(void* addr, unsigned long size);   // NOLINT(google-runtime-int): the runtime's type
void __tsan_write_range(void* addr, unsigned long size);  // NOLINT(google-runtime-int)
}
#endif

namespace loom::dist::detail {

// For its lifetime, the calling thread's memory accesses are MPI's own: not recorded.
class MpiOwnAccesses {
 public:
#if defined(__SANITIZE_THREAD__)
  MpiOwnAccesses() { __tsan_ignore_thread_begin(); }
  ~MpiOwnAccesses() { __tsan_ignore_thread_end(); }
#else
  MpiOwnAccesses() {}   // NOLINT(modernize-use-equals-default): user-provided, so that a scope's
  ~MpiOwnAccesses() {}  // NOLINT(modernize-use-equals-default): guard is not an unused variable
#endif
  MpiOwnAccesses(const MpiOwnAccesses&) = delete;
  MpiOwnAccesses& operator=(const MpiOwnAccesses&) = delete;
};

// MPI reads (or writes) all of `t`: recorded as this thread's access, in a frame of its own (never
// inlined, so that a report names it).
[[gnu::noinline]] inline void mark_mpi_read([[maybe_unused]] const at::Tensor& t) {
#if defined(__SANITIZE_THREAD__)
  if (t.defined() && t.numel() > 0) __tsan_read_range(t.data_ptr(), static_cast<unsigned long>(t.nbytes()));
#endif
}
[[gnu::noinline]] inline void mark_mpi_write([[maybe_unused]] const at::Tensor& t) {
#if defined(__SANITIZE_THREAD__)
  if (t.defined() && t.numel() > 0) __tsan_write_range(t.data_ptr(), static_cast<unsigned long>(t.nbytes()));
#endif
}

}  // namespace loom::dist::detail
