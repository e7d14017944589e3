// The run configuration: TOML text, then `--set` overrides, then validation (core/config.h).
// Input: the TOML text; after a line "%%", one `section.key=value` override per line.
// Contract (NOTE [Reader contract]) plus: the file reader agrees with the text reader, and a
// config that validates reads back equal from its own TOML (a checkpoint stores to_toml(config)
// and a resume or `loom generate` parses it again).
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/core/config.h"

namespace {

void check(std::string_view input) {
  const auto split = loom::fuzz::parts(input, 2);
  const std::string toml(split[0]);
  loom::Config config = loom::parse_config(toml, "fuzz.toml");
  loom::fuzz::require(loom::load_config_file(loom::fuzz::Scratch::write("config.toml", toml)) == config,
                      "load_config_file and parse_config disagree");
  if (split.size() > 1)
    for (std::string_view line : loom::fuzz::lines(split[1])) loom::apply_override(config, line);
  loom::validate(config);
  (void)loom::config_warnings(config);
  (void)config.budget_bytes();
  const std::string written = loom::to_toml(config);
  loom::Config again;
  try {
    again = loom::parse_config(written, "to_toml");
  } catch (const loom::InputError& e) {
    loom::fuzz::fail(std::string("to_toml wrote a config that does not read back: ") + e.what());
  }
  loom::fuzz::require(again == config, "to_toml's config reads back different");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
