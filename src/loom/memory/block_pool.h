#pragma once
// Host blocks that are costly to get, kept for reuse (the swap tier's pinned blocks on a GPU, NOTE
// [Swap tier]): pinning maps and locks pages, about a millisecond per call, so a block freed is
// kept and given again for the same size. A swapping layer's state has the same sizes every
// micro-batch, so from the second step on every request finds a block. Thread-safe: a tensor over
// a block gives it back when freed, on whatever thread, and holds the pool until then; the pool
// returns what it keeps to the system when the last holder lets go.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace loom::memory {

class BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  using Allocate = std::function<void*(size_t bytes)>;  // nullptr when the system has none
  using Release = std::function<void(void*)>;
  static std::shared_ptr<BlockPool> make(Allocate allocate, Release release, std::string what);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A contiguous tensor over a block: a kept one of the same rounded size, else a new one (the
  // kept ones are released and the allocation tried again before OutOfMemory is thrown).
  at::Tensor take(at::IntArrayRef sizes, at::ScalarType dtype);
  int64_t live_bytes() const;  // the bytes of the tensors over blocks now
  int64_t peak_bytes() const;  // the most since the last reset
  void reset_peak();
  int64_t kept_bytes() const;  // blocks given back and kept
  int64_t allocations() const;  // blocks the system gave, ever

 private:
  BlockPool(Allocate allocate, Release release, std::string what);
  void give_back(void* block, size_t size, int64_t bytes);
  void release_kept();  // with the lock held

  Allocate allocate_;
  Release release_;
  std::string what_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> kept_;  // by rounded size
  int64_t live_ = 0, peak_ = 0, kept_bytes_ = 0, allocations_ = 0;
};

}  // namespace loom::memory
