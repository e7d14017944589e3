// A checkpoint's tensor file in the safetensors layout (ckpt/tensor_file.h): the header read and
// checked against the file's size, then every entry's data. Input: the file's bytes.
// Contract (NOTE [Reader contract]) plus: every entry lies inside the data, its bytes are its
// shape's, and reading it gives a tensor of that dtype and shape. The allocation bound is the
// fuzzer's -malloc_limit_mb: nothing may allocate more than the file holds.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/ckpt/tensor_file.h"

namespace {

void check(std::string_view input) {
  const loom::ckpt::TensorFileReader reader(loom::fuzz::Scratch::write("rank.safetensors", input));
  for (const auto& [key, e] : reader.entries()) {
    loom::fuzz::require(8 <= e.begin && e.begin <= e.end && e.end <= reader.file_bytes(), "an entry lies outside the file");
    const at::Tensor t = reader.read(key);
    loom::fuzz::require(t.scalar_type() == e.dtype && t.sizes().vec() == e.shape, "a tensor reads with another dtype or shape");
    loom::fuzz::require(static_cast<int64_t>(t.nbytes()) == e.end - e.begin, "a tensor's bytes are not its entry's");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
