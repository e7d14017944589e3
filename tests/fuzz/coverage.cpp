// NOTE [Coverage without clang]: libFuzzer is guided by coverage counters that clang's
// -fsanitize=fuzzer inserts, but clang cannot build loom: libtorch 1.13's ATen headers do not compile
// under clang in C++20 (std::vector<c10::IValue> of a type still incomplete in ATen/core/List.h,
// with libstdc++ 12's constexpr vector). So the fuzz build is gcc's, with AddressSanitizer and
// UndefinedBehaviorSanitizer, -fsanitize-coverage=trace-cmp (comparisons, which libFuzzer reads
// directly) and trace-pc: a call at every basic block, which libFuzzer 14 no longer accepts (its
// own __sanitizer_cov_trace_pc only prints that; tests/fuzz/CMakeLists.txt weakens it in a copy of
// the runtime). This file takes those calls: each block's address is hashed into one of 64 Ki
// 8-bit counters that libFuzzer registers as inline counters, the form clang itself emits. A
// collision merges two blocks; with a few thousand blocks in loom's readers that costs little.
#include <cstddef>
#include <cstdint>

namespace {

constexpr size_t kSlots = size_t{1} << 16;
uint8_t counters[kSlots];
uintptr_t pc_table[2 * kSlots];  // (pc, flags) pairs: libFuzzer wants one per counter

}  // namespace

extern "C" {
void __sanitizer_cov_8bit_counters_init(uint8_t* begin, uint8_t* end);
void __sanitizer_cov_pcs_init(const uintptr_t* begin, const uintptr_t* end);

__attribute__((no_sanitize_coverage, no_sanitize("address", "undefined"))) void __sanitizer_cov_trace_pc() {
  const auto pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  counters[(pc ^ (pc >> 15)) & (kSlots - 1)]++;
}
// gcc's trace-cmp also reports floating-point comparisons, which libFuzzer has no hook for.
__attribute__((no_sanitize_coverage)) void __sanitizer_cov_trace_cmpf(float, float) {}
__attribute__((no_sanitize_coverage)) void __sanitizer_cov_trace_cmpd(double, double) {}
}

__attribute__((constructor, no_sanitize_coverage)) static void register_counters() {
  for (size_t i = 0; i < kSlots; ++i) pc_table[2 * i] = i + 1;
  __sanitizer_cov_8bit_counters_init(counters, counters + kSlots);
  __sanitizer_cov_pcs_init(pc_table, pc_table + 2 * kSlots);
}
