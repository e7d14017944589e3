#include "loom/train/equivalence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "loom/dist/null_communicator.h"
#include "loom/nn/gradient_check.h"
#include "loom/train/trainer.h"

namespace loom::train {
namespace {

struct Trained {
  std::vector<StepRecord> records;
  std::map<std::string, std::pair<at::Tensor, Shard>> params;  // name -> (this rank's value, its shard)
};

Trained trained_run(const Config& config, dist::Communicator& world, const models::ModelKinds& kinds) {
  Trainer trainer(config, world, "", kinds);
  Trained out;
  out.records = trainer.run({.peak_flops = 1e9});  // a fixed peak: nothing measured, nothing printed
  for (nn::Param* p : trainer.model().params())
    out.params.try_emplace(p->name, trainer.value_of(*p).clone(), p->part());  // collective for a sparse table
  return out;
}

double relative(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), std::numeric_limits<double>::min());
}

// The serial slice a shard holds (rows past the serial size are vocabulary padding), and that
// slice of `covered` marked.
at::Tensor serial_part(const at::Tensor& serial, const Shard& shard, at::Tensor& covered) {
  if (shard.dim < 0) {
    covered.fill_(1);
    return serial;
  }
  const int64_t real = std::clamp<int64_t>(serial.size(shard.dim) - shard.start, 0, shard.length);
  if (real == 0) return {};
  covered.narrow(shard.dim, shard.start, real).fill_(1);
  return serial.narrow(shard.dim, shard.start, real);
}

}  // namespace

Config serial_config(const Config& config) {
  Config serial = config;
  serial.parallel = ParallelConfig{};
  serial.parallel.sparse = config.parallel.sparse;
  serial.memory = MemoryConfig{};
  return serial;
}

double Equivalence::worst() const {
  if (!problems.empty()) return std::numeric_limits<double>::infinity();
  return std::max({loss, grad_norm, weights});
}

std::string Equivalence::describe() const {
  std::string text = fmt::format("{} steps, {} parameter shards against the serial run: loss {:.3g}, gradient norm {:.3g}, "
                                 "weights {:.3g} (largest relative differences)",
                                 steps, compared, loss, grad_norm, weights);
  for (const std::string& problem : problems) text += "; " + problem;
  return text;
}

Equivalence compare_with_serial(const Config& config, dist::Communicator& world, const models::ModelKinds& kinds) {
  const Trained layout = trained_run(config, world, kinds);
  dist::NullCommunicator alone;
  const Trained serial = trained_run(serial_config(config), alone, kinds);

  Equivalence out{.steps = static_cast<int64_t>(layout.records.size())};
  if (layout.records.size() != serial.records.size())
    out.problems.push_back(fmt::format("the layout ran {} steps, the serial run {}", layout.records.size(),
                                       serial.records.size()));
  for (size_t i = 0; i < std::min(layout.records.size(), serial.records.size()); ++i) {
    out.loss = std::max(out.loss, relative(layout.records[i].loss, serial.records[i].loss));
    out.grad_norm = std::max(out.grad_norm, relative(layout.records[i].grad_norm, serial.records[i].grad_norm));
  }
  // Errors per rank, then the largest over ranks; coverage of every serial element by some rank.
  double weights = 0;
  int64_t compared = 0, unknown = 0;
  for (const auto& [name, held] : layout.params) {
    const auto it = serial.params.find(name);
    if (it == serial.params.end()) {
      ++unknown;
      continue;
    }
    at::Tensor scratch = at::zeros(it->second.first.sizes(), at::kLong);
    const at::Tensor want = serial_part(it->second.first, held.second, scratch);
    if (!want.defined()) continue;
    const Shard& shard = held.second;
    const at::Tensor got = shard.dim < 0 ? held.first : held.first.narrow(shard.dim, 0, want.size(shard.dim));
    weights = std::max(weights, nn::relative_error(got, want));
    ++compared;
  }
  at::Tensor figures = at::tensor({weights}, at::kDouble);
  world.all_reduce(figures, dist::ReduceOp::Max);
  at::Tensor counts = at::tensor({compared, unknown}, at::kLong);
  world.all_reduce(counts, dist::ReduceOp::Sum);
  out.weights = figures[0].item<double>();
  out.compared = counts[0].item<int64_t>();
  if (counts[1].item<int64_t>() > 0)
    out.problems.push_back(fmt::format("{} parameter(s) of the layout have no serial parameter of their name",
                                       counts[1].item<int64_t>()));
  // Serial order is the same on every rank: one collective per parameter, in that order.
  for (const auto& [name, value] : serial.params) {
    at::Tensor covered = at::zeros(value.first.sizes(), at::kLong);
    if (const auto it = layout.params.find(name); it != layout.params.end()) serial_part(value.first, it->second.second, covered);
    world.all_reduce(covered, dist::ReduceOp::Max);
    if (covered.min().item<int64_t>() == 0)
      out.problems.push_back(fmt::format("some elements of \"{}\" are held by no rank of the layout", name));
  }
  return out;
}

}  // namespace loom::train
