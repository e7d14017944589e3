// `loom profile` files (plan/profile.h, memory.profile): the JSON text, then read from a file
// against a run's config and chain. Input: the file's text.
// Contract (NOTE [Reader contract]) plus the value's invariants (positive finite times and rates,
// groups of 2 or more ranks), and a profile that reads writes back (to_json) as one that reads equal.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/plan/profile.h"

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

void check_value(const loom::plan::Profile& p) {
  loom::fuzz::require(p.version >= 1 && p.version <= loom::plan::kProfileVersion && p.threads >= 1 && !p.layers.empty(),
                      "version, threads or layers out of range");
  for (const loom::plan::LayerProfile& l : p.layers)
    loom::fuzz::require(positive(l.forward_s) && positive(l.backward_input_s) && positive(l.backward_weight_s) &&
                            std::isfinite(l.param_bytes) && l.param_bytes >= 0 && std::isfinite(l.saved_bytes) &&
                            l.saved_bytes >= 0,
                        "a layer's times or bytes out of range");
  loom::fuzz::require(positive(p.device_to_host_bytes_per_s) && positive(p.host_to_device_bytes_per_s),
                      "a copy rate out of range");
  for (const loom::plan::CollectiveProfile& c : p.collectives)
    loom::fuzz::require(c.ranks >= 2 && positive(c.alpha_s) && positive(c.beta_s_per_byte), "a collective out of range");
}

void check(std::string_view input) {
  const std::string text(input);
  const loom::plan::Profile p = loom::plan::profile_from_json(text, "fuzz.json");
  check_value(p);
  loom::plan::Profile again;
  try {
    again = loom::plan::profile_from_json(loom::plan::to_json(p).dump(), "to_json");
  } catch (const loom::InputError& e) {
    loom::fuzz::fail(std::string("to_json wrote a profile that does not read back: ") + e.what());
  }
  loom::fuzz::require(again == p, "to_json's profile reads back different");
  // From a file, for the default config and the profile's own chain: the identity checks run.
  std::vector<std::string> names;
  for (const loom::plan::LayerProfile& l : p.layers) names.push_back(l.name);
  const loom::plan::Profile read =
      loom::plan::read_profile(loom::fuzz::Scratch::write("profile.json", text), loom::Config{}, names);
  loom::fuzz::require(read == p, "read_profile and profile_from_json disagree");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
