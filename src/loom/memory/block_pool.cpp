#include "loom/memory/block_pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/core/error.h"
#include "loom/core/sanitizer.h"
#include "loom/core/units.h"
#include "loom/memory/accounting_allocator.h"

namespace loom::memory {
namespace {

// Sizes are rounded up to whole pages of 4 KiB: tensors of nearly equal size share blocks.
constexpr size_t kGranule = 4096;

size_t rounded(size_t bytes) { return std::max<size_t>(1, (bytes + kGranule - 1) / kGranule) * kGranule; }

}  // namespace

BlockPool::BlockPool(Allocate allocate, Release release, std::string what)
    : allocate_(std::move(allocate)), release_(std::move(release)), what_(std::move(what)) {}

std::shared_ptr<BlockPool> BlockPool::make(Allocate allocate, Release release, std::string what) {
  return std::shared_ptr<BlockPool>(new BlockPool(std::move(allocate), std::move(release), std::move(what)));
}

BlockPool::~BlockPool() { release_kept(); }  // every block is back: each tensor held the pool

void BlockPool::release_kept() {
  for (auto& [size, blocks] : kept_)
    for (void* block : blocks) release_(block);
  kept_.clear();
  kept_bytes_ = 0;
}

at::Tensor BlockPool::take(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const int64_t bytes = numel * static_cast<int64_t>(at::elementSize(dtype));
  const size_t size = rounded(static_cast<size_t>(bytes));
  void* block = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (auto it = kept_.find(size); it != kept_.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      kept_bytes_ -= static_cast<int64_t>(size);
    } else {
      block = allocate_(size);
      if (block == nullptr) {  // what is kept may be what the system lacks
        release_kept();
        block = allocate_(size);
      }
      if (block == nullptr)
        throw OutOfMemory(fmt::format("out of {} allocating {}", what_, format_bytes(static_cast<double>(size))));
      ++allocations_;
    }
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  auto back = [pool = shared_from_this(), size, bytes](void* p) {
    sanitizer::acquire(p);  // NOTE [Orderings ThreadSanitizer cannot see]
    pool->give_back(p, size, bytes);
  };
  return at::from_blob(block, sizes, back, at::TensorOptions().dtype(dtype));
}

void BlockPool::give_back(void* block, size_t size, int64_t bytes) {
  std::lock_guard lock(mutex_);
  kept_[size].push_back(block);
  kept_bytes_ += static_cast<int64_t>(size);
  live_ -= bytes;
}

int64_t BlockPool::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_;
}

int64_t BlockPool::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

void BlockPool::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = live_;
}

int64_t BlockPool::kept_bytes() const {
  std::lock_guard lock(mutex_);
  return kept_bytes_;
}

int64_t BlockPool::allocations() const {
  std::lock_guard lock(mutex_);
  return allocations_;
}

}  // namespace loom::memory
