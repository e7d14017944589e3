#pragma once
// NOTE [Orderings ThreadSanitizer cannot see]: Debian's libtorch is not instrumented, so in a
// ThreadSanitizer build (`make test-tsan`) the atomic reference counts that order a tensor's last
// use on one thread before its storage is freed on another are invisible: the free looks like a
// race with the other thread's reads. Where loom hands the last references of a storage to another
// thread (the swap copy thread drops its references when a copy is done, memory/swap.cpp), it states
// the ordering the counts give: release(data) where a thread drops its reference to the storage at
// `data`, acquire(data) where that storage is freed (memory/accounting_allocator.cpp and the swap
// tier's host blocks). Both do nothing outside a ThreadSanitizer build.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace loom::sanitizer {

inline void release([[maybe_unused]] const void* data) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(data));
#endif
}

inline void acquire([[maybe_unused]] const void* data) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(data));
#endif
}

}  // namespace loom::sanitizer
