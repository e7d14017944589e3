#include "loom/memory/accounting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>

#include "loom/core/sanitizer.h"
#include "loom/core/units.h"

namespace loom::memory {
namespace {

// Each block carries its size in a header, so the deleter needs no lookup table. The header is
// one cache line, which keeps the data as aligned as libtorch's own allocator does.
constexpr size_t kHeader = 64;

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_budget{0};
std::mutex g_hint_mutex;  // the hint is read only when an allocation is refused
std::string g_hint = kDefaultBudgetHint;

std::string budget_hint() {
  std::lock_guard lock(g_hint_mutex);
  return g_hint;
}

void record_peak(int64_t live) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void free_block(void* data) {
  sanitizer::acquire(data);  // NOTE [Orderings ThreadSanitizer cannot see]
  auto* base = static_cast<char*>(data) - kHeader;
  g_live.fetch_sub(static_cast<int64_t>(*reinterpret_cast<size_t*>(base)), std::memory_order_relaxed);
  std::free(base);
}

class AccountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    const auto n = static_cast<int64_t>(bytes);
    const int64_t budget = g_budget.load(std::memory_order_relaxed);
    const int64_t live = g_live.fetch_add(n, std::memory_order_relaxed) + n;
    if (budget > 0 && live > budget) {
      g_live.fetch_sub(n, std::memory_order_relaxed);
      throw BudgetExceeded(fmt::format(
          "memory budget exceeded: allocating {} with {} in use would pass memory.budget = {}; hint: {}",
          format_bytes(static_cast<double>(n)), format_bytes(static_cast<double>(live - n)),
          format_bytes(static_cast<double>(budget)), budget_hint()));
    }
    record_peak(live);
    void* raw = nullptr;
    if (posix_memalign(&raw, kHeader, bytes + kHeader) != 0) {
      g_live.fetch_sub(n, std::memory_order_relaxed);
      throw OutOfMemory(fmt::format("out of host memory allocating {}", format_bytes(static_cast<double>(n))));
    }
    auto* base = static_cast<char*>(raw);
    *reinterpret_cast<size_t*>(base) = bytes;
    void* data = base + kHeader;
    return {data, data, &free_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  // Blocks are plain host memory: a clone's copy is a memcpy.
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

AccountingAllocator g_allocator;

}  // namespace

void install_accounting_allocator() {
  // Priority above libtorch's default CPU allocator (registered at 0).
  c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
}

int64_t live_bytes() { return g_live.load(std::memory_order_relaxed); }
int64_t peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_peak() { g_peak.store(live_bytes(), std::memory_order_relaxed); }
void set_budget(int64_t bytes) { g_budget.store(bytes, std::memory_order_relaxed); }
int64_t budget() { return g_budget.load(std::memory_order_relaxed); }

void set_budget_hint(std::string hint) {
  std::lock_guard lock(g_hint_mutex);
  g_hint = std::move(hint);
}

}  // namespace loom::memory
