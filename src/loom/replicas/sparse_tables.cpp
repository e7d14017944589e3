#include "loom/replicas/sparse_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace loom::replicas {

SparseTables::SparseTables(const std::vector<nn::Param*>& tables, dist::Communicator& group, int64_t partitions,
                           optim::AdamWOptions options, at::ScalarType dtype, const std::function<void()>& pull)
    : group_(group), options_(options), dtype_(dtype) {
  set_ = partitions > 0;
  partitions_ = set_ ? partitions : choose_partitions(tables, pull);
  for (nn::Param* p : tables) {
    tables_.push_back(std::make_unique<parallel::SparseTable>(*p, group, partitions_, options));
    p->sparse = tables_.back().get();
  }
}

// NOTE [Partition count]: Parallax chooses the number of partitions of its sparse tables from
// short trials fitted to t(P) = a + b / P + c (P - 1): more partitions spread the owners' work
// and the hot rows, each one costs a fixed overhead. Candidates are multiples of the group size
// n (n, 2n, 4n, 8n), so every rank owns the same number of partitions, and the choice is the
// fitted minimum over the multiples of n up to 8n. Each candidate P runs the step-0 exchange
// (pull, push, lazy update) three times on scratch tables of zeros, so the model is untouched;
// every rank takes the group's slowest time, so all fit the same numbers and pick the same P.
// The partition count never changes the numbers trained, only the time.
int64_t SparseTables::choose_partitions(const std::vector<nn::Param*>& tables, const std::function<void()>& pull) {
  const int64_t n = group_.size();
  if (n == 1) return 1;  // one owner: partitions change nothing
  int64_t rows = std::numeric_limits<int64_t>::max();
  for (const nn::Param* p : tables) rows = std::min(rows, p->numel() / p->full_shape[1]);
  // Multiples of the group, so that every rank owns as many partitions as the next (what the
  // budget check assumes); a table of fewer rows than ranks gets one partition per row.
  std::vector<int64_t> candidates;
  for (int64_t p : {n, 2 * n, 4 * n, 8 * n})
    if (p <= rows) candidates.push_back(p);
  if (candidates.empty()) return rows;
  at::Tensor seconds = at::zeros({static_cast<int64_t>(candidates.size())}, at::kDouble);
  for (size_t c = 0; c < candidates.size(); ++c) {
    std::vector<std::unique_ptr<parallel::SparseTable>> scratch;
    for (nn::Param* p : tables) {
      scratch.push_back(std::make_unique<parallel::SparseTable>(*p, group_, candidates[c], options_));
      scratch.back()->initialise_zeros(dtype_);
      p->sparse = scratch.back().get();
    }
    std::vector<double> runs;
    for (int run = 0; run < 3; ++run) {
      group_.barrier();
      const auto start = std::chrono::steady_clock::now();
      pull();
      for (auto& t : scratch) t->push();
      for (auto& t : scratch) t->step(0.0);
      runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(runs.begin(), runs.end());
    seconds[static_cast<int64_t>(c)] = runs[1];
    for (nn::Param* p : tables) p->sparse = nullptr;
  }
  group_.all_reduce(seconds, dist::ReduceOp::Max);
  std::vector<double> measured(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    measured[c] = seconds[static_cast<int64_t>(c)].item<double>();
    trials_.emplace_back(candidates[c], measured[c]);
  }
  if (candidates.size() < 3)  // too few to fit: the fastest trial
    return candidates[std::min_element(measured.begin(), measured.end()) - measured.begin()];
  return parallel::best_partition_count(parallel::fit_partition_cost(candidates, measured), candidates.back(), n);
}

void SparseTables::initialise(uint64_t seed, at::ScalarType dtype) {
  for (auto& t : tables_) t->initialise(seed, dtype);
}

std::pair<double, double> SparseTables::push() {
  at::Tensor sums = at::zeros({2}, at::kDouble);
  for (auto& t : tables_) {
    t->push();
    sums[t->param().shard.dim >= 0 ? 1 : 0] += t->grad_norm_square();
  }
  group_.all_reduce(sums, dist::ReduceOp::Sum);
  return {sums[0].item<double>(), sums[1].item<double>()};
}

void SparseTables::step(double lr, double clip_factor) {
  for (auto& t : tables_) {
    if (clip_factor != 1.0) t->scale_grads(clip_factor);
    t->step(lr);
  }
}

std::string SparseTables::describe() const {
  std::string trials;
  for (auto [p, seconds] : trials_) trials += fmt::format(" P={}: {:.2f} ms", p, seconds * 1e3);
  return fmt::format("{} sparse table{} in {} partitions over {} ranks{}", size(), size() == 1 ? "" : "s",
                     partitions(), group_.size(), trials.empty() ? (set_ ? " (set)" : "") : "; trials" + trials);
}

}  // namespace loom::replicas
