// Schedule CSVs (schedule/schedule.h, parallel.schedule = "csv:PATH" and `loom schedule --from`):
// read from text and from a file, then validated and replayed as every reader of one does.
// Input: the CSV text.
// Contract (NOTE [Reader contract]): the simulator's refusals are InputError too; and a schedule
// that replays writes back (to_csv) as one that reads equal.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/schedule/schedule.h"
#include "loom/schedule/simulator.h"

namespace {

void check(std::string_view input) {
  const std::string text(input);
  const loom::schedule::Schedule s = loom::schedule::from_csv(text, "fuzz.csv");
  const loom::schedule::Schedule from_file = loom::schedule::read_csv(loom::fuzz::Scratch::write("schedule.csv", text));
  loom::fuzz::require(from_file.ranks == s.ranks, "read_csv and from_csv disagree");
  loom::fuzz::require(s.stages >= 1 && s.microbatches >= 1 && s.chunks >= 1, "a count is not positive");
  const loom::schedule::Simulation sim = loom::schedule::simulate(s);
  (void)loom::schedule::format_grid(s, sim);
  const loom::schedule::Schedule again = loom::schedule::from_csv(loom::schedule::to_csv(s), "to_csv");
  loom::fuzz::require(again.ranks == s.ranks && again.microbatches == s.microbatches && again.chunks == s.chunks,
                      "to_csv's schedule reads back different");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
