// The trainer's memory model: what a run needs per rank, checked against memory.budget or the
// machine before anything is allocated, and named by key when an allocation fails.
#include <algorithm>

#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/memory/host_memory.h"
#include "loom/train/trainer.h"

namespace loom::train {

// The estimate against memory.budget, or without one against this machine's memory shared by its
// ranks: an impossible model is refused before anything is allocated.
void Trainer::check_memory(int local_ranks) const {
  const MemoryEstimate need = estimate();
  const int64_t budget = config_.budget_bytes();
  const std::string hint = is_dlrm() ? "shrink model.table_rows or spread the tables over more ranks (parallel.dp "
                                       "with parallel.sparse = \"auto\")"
                                     : "lower train.micro_batch, set memory.recompute = \"full\" or shrink the model";
  if (budget > 0) {
    const double in_use = static_cast<double>(memory::live_bytes());
    LOOM_CHECK_INPUT(need.total() + in_use <= static_cast<double>(budget),
                     "memory.budget = {} is too small: {}{}; hint: raise memory.budget, {}",
                     format_bytes(static_cast<double>(budget)), memory_keys(need),
                     in_use > 0 ? fmt::format(" besides {} already in use", format_bytes(in_use)) : "", hint);
    return;
  }
  const double machine = static_cast<double>(memory::host_memory_bytes());
  const double per_rank = machine / std::max(1, local_ranks);
  LOOM_CHECK_INPUT(need.total() <= per_rank,
                   "the run does not fit this machine: {}, but each of the {} rank{} here has {} ({} in all); "
                   "hint: {}, or use more ranks",
                   memory_keys(need), local_ranks, local_ranks == 1 ? "" : "s", format_bytes(per_rank),
                   format_bytes(machine), hint);
}

std::string Trainer::memory_keys(const MemoryEstimate& need) const {
  const auto& m = config_.model;
  const std::string shape = is_dlrm() ? fmt::format("model.tables = {} x model.table_rows = {} x model.d_model = {}",
                                                    m.tables, m.table_rows, m.d_model)
                                      : fmt::format("model.n_layers = {}, model.d_model = {}, model.vocab = {}",
                                                    m.n_layers, m.d_model, m.vocab);
  std::string text = fmt::format(
      "the run needs at least {} per rank: {} for parameters, gradients and AdamW moments ({}), {} for "
      "activations ({} micro-batch{} of train.micro_batch = {}{})",
      format_bytes(need.total()), format_bytes(need.weights), shape, format_bytes(need.activations), need.stashed,
      need.stashed == 1 ? "" : "es", config_.train.micro_batch,
      is_dlrm() ? "" : fmt::format(" x model.seq_len = {}", m.seq_len));
  if (need.sparse > 0) text += fmt::format(", {} for sparse table rows", format_bytes(need.sparse));
  return text;
}

MemoryEstimate Trainer::estimate() const {
  const int64_t bytes = dtype_ == at::kDouble ? 8 : 4;
  const auto& m = config_.model;
  const nn::Cost cost = model_.cost(config_.train.micro_batch, local_seq(), bytes);
  // Full recomputation keeps each layer's input: seq/tp tokens under tp_sequence. A pipeline
  // stage holds its schedule's peak of stashed micro-batches.
  const int64_t seq_shards = config_.parallel.tp_sequence ? config_.parallel.tp : 1;
  const double per_microbatch = config_.memory.recompute == "full"
                                    ? static_cast<double>(config_.train.micro_batch * local_seq() / seq_shards *
                                                          m.d_model * bytes) *
                                          static_cast<double>(model_.chain.size())
                                    : cost.saved_bytes;
  const int64_t stashed = stage_stashed_[static_cast<size_t>(pp_rank_of(world_rank_))];
  const double activations = per_microbatch * static_cast<double>(stashed);
  // A table on the sparse path: its owner's share of the rows and their two moments, plus the
  // rows this rank pulls in a step and their gradient (NOTE [Sparse exchange]); no dense gradient.
  // A rank owns ceil(P / n) partitions of ceil(rows / P) rows at most (P a multiple of n when
  // chosen automatically); as an owner it serves and receives about as many rows as it pulls.
  double tables = 0, sparse = 0;
  if (config_.parallel.sparse == "auto") {
    const int64_t n = config_.parallel.dp * config_.parallel.sp;
    for (const nn::Param* p : model_.params()) {
      if (!p->embedding) continue;
      const int64_t rows = p->numel() / p->full_shape[1], width = p->full_shape[1];
      const int64_t parts = config_.parallel.sparse_partitions > 0 ? config_.parallel.sparse_partitions
                                                                   : std::min(rows, n);
      const int64_t owned = (parts + n - 1) / n * ((rows + parts - 1) / parts);
      tables += static_cast<double>(p->numel() * bytes);
      sparse += static_cast<double>((3 * std::min(owned, rows) + 4 * std::min(rows, lookups_per_step())) * width * bytes);
    }
  }
  const double dense = cost.param_bytes - tables;
  // ZeRO-1 keeps 1/dp of the two AdamW moments.
  const double moments = 2 * dense / (config_.parallel.zero == 1 ? static_cast<double>(config_.parallel.dp) : 1);
  return {.weights = 2 * dense + moments, .activations = activations, .sparse = sparse, .stashed = stashed};
}

int64_t Trainer::lookups_per_step() const {
  const auto& t = config_.train;
  const int64_t samples = t.global_batch / config_.parallel.dp;
  return samples * (is_dlrm() ? config_.model.bag_size : local_seq());
}

}  // namespace loom::train
