// The accounting allocator counts every libtorch CPU allocation and enforces the budget; the swap
// tier moves tensors out of the budgeted memory and back, bit for bit (NOTE [Swap tier]).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "loom/memory/accounting_allocator.h"
#include "loom/memory/block_pool.h"
#include "loom/memory/swap.h"

namespace loom::memory {
namespace {

using ::testing::HasSubstr;

TEST(AccountingAllocator, CountsLiveAndPeakBytes) {
  install_accounting_allocator();
  const int64_t base = live_bytes();
  reset_peak();
  {
    const at::Tensor a = at::empty({1000}, at::kFloat);      // 4000 bytes
    const at::Tensor b = at::empty({250}, at::kDouble);      // 2000 bytes
    EXPECT_EQ(live_bytes() - base, 6000);
  }
  EXPECT_EQ(live_bytes(), base);
  EXPECT_GE(peak_bytes() - base, 6000);
}

TEST(AccountingAllocator, BudgetTurnsAnOverBudgetAllocationIntoAClearError) {
  install_accounting_allocator();
  const int64_t base = live_bytes();
  set_budget(base + (1 << 20));
  const at::Tensor fits = at::empty({1 << 17}, at::kFloat);  // 512 KiB
  try {
    const at::Tensor too_big = at::empty({1 << 18}, at::kFloat);  // 1 MiB more
    ADD_FAILURE() << "expected BudgetExceeded";
  } catch (const BudgetExceeded& e) {
    EXPECT_THAT(e.what(), HasSubstr("allocating 1.00 MiB"));
    EXPECT_THAT(e.what(), HasSubstr("memory.budget"));
    EXPECT_THAT(e.what(), HasSubstr("in use"));
  }
  set_budget(0);
  EXPECT_EQ(live_bytes() - base, 1 << 19) << "a refused allocation must not count";
}

// The hint a refusal names is the run's (plan::budget_hint; issue 33: under memory.policy = "auto"
// it must not send the user to memory.recompute), and the default once the run has ended.
TEST(AccountingAllocator, RefusalNamesTheHintSetForTheBudget) {
  install_accounting_allocator();
  set_budget(live_bytes() + (1 << 10));
  set_budget_hint("memory.policy = \"auto\" fitted each stage");
  try {
    const at::Tensor too_big = at::empty({1 << 18}, at::kFloat);
    ADD_FAILURE() << "expected BudgetExceeded";
  } catch (const BudgetExceeded& e) {
    EXPECT_THAT(e.what(), HasSubstr("hint: memory.policy = \"auto\" fitted each stage"));
  }
  set_budget_hint(kDefaultBudgetHint);
  set_budget(0);
}

// NOTE [Measurements outside the budget]: lifted for a scope, restored on leaving it, also by an
// exception.
TEST(AccountingAllocator, BudgetLiftedForAScopeOnly) {
  install_accounting_allocator();
  const int64_t budget = live_bytes() + (1 << 10);
  set_budget(budget);
  {
    const BudgetLifted lifted;
    EXPECT_EQ(memory::budget(), 0);
    const at::Tensor probe = at::empty({1 << 18}, at::kFloat);  // 1 MiB: no budget now
  }
  EXPECT_EQ(memory::budget(), budget);
  try {
    const BudgetLifted lifted;
    throw Error("leaving by an exception");
  } catch (const Error&) {
  }
  EXPECT_EQ(memory::budget(), budget);
  set_budget(0);
}

TEST(Swapper, MovesTensorsOutOfTheBudgetAndBackBitForBit) {
  install_accounting_allocator();
  auto tier = make_host_tier();
  Swapper swapper(*tier);
  const at::Tensor a = at::randn({256, 64}, at::kDouble), b = at::arange(1000, at::kLong);
  const at::Tensor strided = at::randn({64, 32}, at::kFloat).t();  // not contiguous: copied as such
  const at::Tensor a_copy = a.clone(), b_copy = b.clone(), strided_copy = strided.clone();
  const int64_t base = live_bytes();
  SwapTicket ticket = swapper.swap_out({a.clone(), b.clone(), strided.clone()});
  swapper.drain();
  EXPECT_EQ(live_bytes(), base) << "the budgeted copies are released once on the host tier";
  const int64_t on_host = 256 * 64 * 8 + 1000 * 8 + 64 * 32 * 4;
  EXPECT_EQ(tier->host_live_bytes(), on_host);
  const std::vector<at::Tensor> back = swapper.take(ticket);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_TRUE(at::equal(back[0], a_copy));
  EXPECT_TRUE(at::equal(back[1], b_copy));
  EXPECT_TRUE(at::equal(back[2], strided_copy));
  EXPECT_EQ(back[2].sizes(), strided_copy.sizes());
  EXPECT_EQ(tier->host_live_bytes(), 0) << "the host copies are freed once brought back";
  EXPECT_EQ(tier->host_peak_bytes(), on_host);
  EXPECT_EQ(live_bytes() - base, on_host);
}

TEST(Swapper, ViewsOfOneStorageTravelOnceAndComeBackSharingIt) {
  auto tier = make_host_tier();
  Swapper swapper(*tier);
  const at::Tensor qkv = at::randn({4, 3, 8}, at::kDouble);
  const at::Tensor q = qkv.select(1, 0), k = qkv.select(1, 1), v = qkv.select(1, 2);
  const at::Tensor buffer = at::randn({1 << 16}, at::kFloat), slice = buffer.narrow(0, 16, 16);
  SwapTicket ticket = swapper.swap_out({q, k, v, slice});
  swapper.drain();
  EXPECT_EQ(tier->host_live_bytes(), 4 * 3 * 8 * 8 + 16 * 4) << "qkv once, and the slice alone, not its buffer";
  const std::vector<at::Tensor> back = swapper.take(ticket);
  ASSERT_EQ(back.size(), 4u);
  EXPECT_TRUE(at::equal(back[0], q) && at::equal(back[1], k) && at::equal(back[2], v));
  EXPECT_EQ(back[0].storage().data(), back[2].storage().data()) << "q, k and v still share one storage";
  EXPECT_EQ(back[1].strides(), k.strides());
  EXPECT_TRUE(at::equal(back[3], slice));
}

TEST(Swapper, ACopyBackOverBudgetIsRethrownByTake) {
  install_accounting_allocator();
  auto tier = make_host_tier();
  Swapper swapper(*tier);
  SwapTicket ticket = swapper.swap_out({at::zeros({1 << 18}, at::kFloat)});  // 1 MiB
  swapper.drain();
  set_budget(live_bytes() + (1 << 10));  // no room for the copy back
  swapper.swap_in(ticket);
  EXPECT_THROW(swapper.take(ticket), BudgetExceeded);
  set_budget(0);
}

// The blocks a pool gets from its system (the swap tier's pinned ones on a GPU), here from the C
// heap with a limit: what was given, what is out now, and refusals past the limit.
struct FakeSystem {
  size_t limit = size_t{1} << 30;
  std::map<void*, size_t> out;
  int given = 0, released = 0;
  BlockPool::Allocate allocate() {
    return [this](size_t bytes) -> void* {
      size_t used = 0;
      for (const auto& [p, n] : out) used += n;
      if (used + bytes > limit) return nullptr;
      void* p = std::malloc(bytes);
      out[p] = bytes, ++given;
      return p;
    };
  }
  BlockPool::Release release() {
    return [this](void* p) {
      out.erase(p), ++released;
      std::free(p);
    };
  }
};

// A block freed goes back to the pool and is given again for the same rounded size, so a swapping
// layer's state pins its blocks once; live and peak count the tensors' bytes.
TEST(BlockPool, KeepsFreedBlocksForTheSameSize) {
  FakeSystem system;
  {
    auto pool = BlockPool::make(system.allocate(), system.release(), "test memory");
    void* first = nullptr;
    {
      const at::Tensor a = pool->take({1000}, at::kFloat), b = pool->take({10, 10}, at::kDouble);
      first = a.data_ptr();
      EXPECT_EQ(pool->live_bytes(), 4000 + 800);
      EXPECT_EQ(system.given, 2);
    }
    EXPECT_EQ(pool->live_bytes(), 0);
    EXPECT_EQ(pool->peak_bytes(), 4800);
    EXPECT_EQ(pool->kept_bytes(), 2 * 4096) << "sizes round up to 4 KiB";
    const at::Tensor again = pool->take({999}, at::kFloat);  // the same 4 KiB rounded
    EXPECT_EQ(again.data_ptr(), first);
    EXPECT_EQ(system.given, 2) << "no new block for a size the pool keeps";
    const at::Tensor larger = pool->take({2000}, at::kFloat);
    EXPECT_EQ(system.given, 3);
    pool->reset_peak();
    EXPECT_EQ(pool->peak_bytes(), 999 * 4 + 2000 * 4);
    EXPECT_EQ(pool->allocations(), 3);
  }
  EXPECT_EQ(system.released, 3) << "every block goes back to the system with the pool";
  EXPECT_TRUE(system.out.empty());
}

// A tensor outlives the pool's last other holder: its block is kept until it is freed, then all
// go back to the system.
TEST(BlockPool, ATensorHoldsThePoolUntilFreed) {
  FakeSystem system;
  at::Tensor held;
  {
    auto pool = BlockPool::make(system.allocate(), system.release(), "test memory");
    held = pool->take({64}, at::kLong);
    (void)pool->take({64}, at::kLong);  // freed at once: kept
  }
  EXPECT_EQ(system.released, 0);
  held.fill_(7);
  EXPECT_EQ(held.sum().item<int64_t>(), 7 * 64);
  held = at::Tensor();
  EXPECT_EQ(system.released, 2);
}

// Past the system's limit the kept blocks are given back and the allocation tried again; when
// that fails too, OutOfMemory names the memory and the size.
TEST(BlockPool, GivesBackKeptBlocksBeforeRefusing) {
  FakeSystem system;
  system.limit = 3 * 4096;
  auto pool = BlockPool::make(system.allocate(), system.release(), "pinned test memory");
  (void)pool->take({1024}, at::kFloat);  // 4 KiB, kept
  (void)pool->take({2048}, at::kFloat);  // 8 KiB, kept: the limit is reached
  const at::Tensor big = pool->take({3072}, at::kFloat);  // 12 KiB: only after both are released
  EXPECT_EQ(system.released, 2);
  EXPECT_EQ(pool->kept_bytes(), 0);
  try {
    (void)pool->take({1}, at::kFloat);
    ADD_FAILURE() << "no refusal past the limit";
  } catch (const OutOfMemory& e) {
    EXPECT_THAT(e.what(), HasSubstr("out of pinned test memory allocating 4.00 KiB"));
  }
}

}  // namespace
}  // namespace loom::memory
