#pragma once
// Texts over a communicator that moves numbers: each rank's string, to every rank.
#include <string>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::dist {

// Collective over `world`: every rank passes its text and gets every rank's, by rank. The texts
// travel as int64 words: an all-gather of the lengths, then of the texts padded to the longest
// (skipped when every text is empty). Memory: every rank's text, on every rank, for the call.
std::vector<std::string> all_gather_text(Communicator& world, const std::string& mine);

}  // namespace loom::dist
