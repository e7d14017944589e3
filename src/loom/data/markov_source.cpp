#include "loom/data/markov_source.h"

#include <array>
#include <cmath>

#include "loom/core/rng.h"

namespace loom::data {
namespace {
constexpr std::array<double, 4> kSuccessorProbability{0.6, 0.25, 0.1, 0.05};
}

MarkovSource::MarkovSource(int64_t vocab, uint64_t seed)
    : vocab_(vocab), table_key_(stream_key(seed, "data.markov.table")), walk_key_(stream_key(seed, "data.markov.walk")) {}

void MarkovSource::window(int64_t index, int64_t length, int64_t* out) const {
  const auto n = static_cast<uint64_t>(vocab_);
  const uint64_t base = static_cast<uint64_t>(index) * static_cast<uint64_t>(length + 1);
  auto token = static_cast<int64_t>(uniform_int(walk_key_, base, n));
  for (int64_t t = 0; t < length; ++t) {
    out[t] = token;
    double u = uniform01(walk_key_, base + static_cast<uint64_t>(t) + 1);
    size_t choice = 0;
    while (choice + 1 < kSuccessorProbability.size() && u >= kSuccessorProbability[choice])
      u -= kSuccessorProbability[choice++];
    token = static_cast<int64_t>(uniform_int(table_key_, static_cast<uint64_t>(token) * 4 + choice, n));
  }
}

std::string MarkovSource::describe() const {
  return fmt::format("synthetic Markov chain over {} tokens (entropy {:.2f} nats)", vocab_, entropy_nats());
}

double MarkovSource::entropy_nats() {
  double h = 0;
  for (double p : kSuccessorProbability) h -= p * std::log(p);
  return h;
}

}  // namespace loom::data
