// A checkpoint's manifest.json (ckpt/manifest.h), read from a checkpoint directory as `--resume`,
// `loom ckpt` and `loom generate` read it. Input: the manifest's text.
// Contract (NOTE [Reader contract]) plus: every box lies inside its tensor's shape and names a
// listed file of a plain name; and a manifest that reads writes back (manifest_text) as the same
// text once read again.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/ckpt/manifest.h"

namespace {

void check_value(const loom::ckpt::Manifest& m) {
  loom::fuzz::require(m.version == loom::ckpt::kFormatVersion && m.step >= 0, "version or step out of range");
  for (const loom::ckpt::StoredTensor& t : m.tensors)
    for (const loom::ckpt::StoredBox& b : t.boxes) {
      loom::fuzz::require(b.box.offset.size() == t.shape.size() && b.box.size.size() == t.shape.size(),
                          "a box's rank differs from its tensor's");
      for (size_t d = 0; d < t.shape.size(); ++d)
        loom::fuzz::require(b.box.offset[d] >= 0 && b.box.size[d] >= 0 && b.box.offset[d] + b.box.size[d] <= t.shape[d],
                            "a box lies outside its tensor");
      loom::fuzz::require(!b.file.empty() && b.file.find('/') == std::string::npos && b.file[0] != '.',
                          "a box names a file outside the checkpoint");
    }
}

void check(std::string_view input) {
  loom::fuzz::Scratch::write("manifest.json", input);
  const loom::ckpt::Manifest m = loom::ckpt::read_manifest(loom::fuzz::Scratch::dir().string());
  check_value(m);
  const std::string text = loom::ckpt::manifest_text(m);
  std::string again;
  try {
    again = loom::ckpt::manifest_text(loom::ckpt::parse_manifest(text, "manifest_text"));
  } catch (const loom::InputError& e) {
    loom::fuzz::fail(std::string("manifest_text wrote a manifest that does not read back: ") + e.what());
  }
  loom::fuzz::require(again == text, "manifest_text's manifest reads back different");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
