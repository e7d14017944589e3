#include "loom/replicas/sparse_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

#include "loom/core/error.h"
#include "loom/replicas/table_trials.h"

namespace loom::replicas {
namespace {

// A dense table's stand-in while the layers run pull_rows: it notes the rows looked up in `mask`
// (float [rows]) and serves nothing (NOTE [Lazy rows of dense tables]).
class RowRecorder final : public nn::SparseRows {
 public:
  RowRecorder(std::string name, at::Tensor mask) : name_(std::move(name)), mask_(std::move(mask)) {}
  void pull(const at::Tensor& ids) override {
    const at::Tensor flat = ids.reshape({-1});
    mask_.index_fill_(0, flat.masked_select(flat.ge(0)), 1.0);
  }
  at::Tensor lookup(const at::Tensor&) const override { throw misuse(); }
  void accumulate(const at::Tensor&, const at::Tensor&) override { throw misuse(); }
  at::Tensor gather_full() const override { throw misuse(); }

 private:
  Error misuse() const { return Error(fmt::format("[sparse] {} is dense: its row recorder only records", name_)); }
  std::string name_;
  at::Tensor mask_;
};

// Points each table's Param::sparse at a stand-in (a recorder, a scratch table) for a scope, and
// back at none when the scope ends, by an exception too: no table is left pointing at a stand-in.
class StandIns {
 public:
  StandIns(const std::vector<nn::Param*>& tables, const std::vector<nn::SparseRows*>& rows) : tables_(tables) {
    for (size_t i = 0; i < tables_.size(); ++i) tables_[i]->sparse = rows[i];
  }
  ~StandIns() {
    for (nn::Param* p : tables_) p->sparse = nullptr;
  }
  StandIns(const StandIns&) = delete;
  StandIns& operator=(const StandIns&) = delete;

 private:
  std::vector<nn::Param*> tables_;
};

// Runs `pull` (the layers' pull_rows) with a recorder on each of `tables`; `masks[i]` (float
// [rows of table i]) gets the rows this rank looks up.
void record_rows(const std::vector<nn::Param*>& tables, const std::vector<at::Tensor>& masks,
                 const std::function<void()>& pull) {
  std::vector<std::unique_ptr<RowRecorder>> recorders;
  std::vector<nn::SparseRows*> rows;
  for (size_t i = 0; i < tables.size(); ++i) {
    masks[i].zero_();
    recorders.push_back(std::make_unique<RowRecorder>(tables[i]->name, masks[i]));
    rows.push_back(recorders.back().get());
  }
  const StandIns recording(tables, rows);
  pull();
}

// Every embedding table of `model`, in model order.
std::vector<nn::Param*> embedding_tables(const models::Model& model) {
  std::vector<nn::Param*> out;
  for (nn::Param* p : model.params())
    if (p->embedding) out.push_back(p);
  return out;
}

int64_t rows_of(const nn::Param& p) { return p.numel() / p.full_shape[1]; }

}  // namespace

// The lazy dense tables: each step's union of looked-up rows, and which elements AdamW updates.
class SparseTables::LazyRows final : public optim::RowFilter {
 public:
  explicit LazyRows(std::vector<nn::Param*> tables) : tables_(std::move(tables)) {
    int64_t rows = 0;
    for (const nn::Param* p : tables_) rows += rows_of(*p);
    masks_ = at::zeros({rows}, at::kFloat);
    int64_t at = 0;
    for (const nn::Param* p : tables_) views_.push_back(masks_.narrow(0, at, rows_of(*p))), at += rows_of(*p);
  }
  void record(const std::function<void()>& pull, dist::Communicator& group) {
    record_rows(tables_, views_, pull);
    work_ = group.all_reduce_async(masks_, dist::ReduceOp::Max);  // finished by finish(), before AdamW
  }
  void finish() {
    if (work_) work_->wait(), work_.reset();
  }
  // The table whose memory `value` views, and the elements of `value` in its rows looked up.
  at::Tensor elements_of(const at::Tensor& value) const override {
    const auto begin = reinterpret_cast<uintptr_t>(value.data_ptr());
    const auto size = static_cast<uintptr_t>(value.element_size());
    for (size_t i = 0; i < tables_.size(); ++i) {
      const at::Tensor& whole = tables_[i]->value;
      if (!whole.defined() || whole.scalar_type() != value.scalar_type()) continue;
      const auto base = reinterpret_cast<uintptr_t>(whole.data_ptr());
      if (begin < base || begin >= base + static_cast<uintptr_t>(whole.numel()) * size) continue;
      const auto lo = static_cast<int64_t>((begin - base) / size), hi = lo + value.numel();
      LOOM_CHECK(hi <= whole.numel(), "[sparse] a piece of {} runs past its end", tables_[i]->name);
      const at::Tensor elements = row_elements(views_[i], whole.size(1));
      if (lo == 0 && hi == whole.numel()) return elements;
      return elements.masked_select(elements.ge(lo).logical_and_(elements.lt(hi))).sub_(lo);
    }
    return {};
  }

 private:
  std::vector<nn::Param*> tables_;
  at::Tensor masks_;               // one float per row of every table, reduced with max over the group
  std::vector<at::Tensor> views_;  // each table's rows of it
  dist::WorkPtr work_;
};

bool tables_measure(SparseMode mode, int64_t partitions) {
  return mode == SparseMode::Auto || (mode == SparseMode::On && partitions == 0);
}

SparseTables::SparseTables(models::Model& model, dist::Communicator& group, dist::Communicator& tp,
                           const TableOptions& options)
    : model_(model), group_(group), options_(options) {
  set_ = options.partitions > 0;
  const std::vector<nn::Param*> tables = embedding_tables(model);
  if (tables.empty()) return;  // a pipeline stage without an embedding, a model without tables
  const std::vector<bool> sparse = choose_paths(tables, tp);
  std::vector<nn::Param*> lazy;
  for (size_t i = 0; i < tables.size(); ++i) {
    if (sparse[i]) {
      tables_.push_back(
          std::make_unique<parallel::SparseTable>(*tables[i], group, partitions_, options.adamw, options.update));
      tables[i]->sparse = tables_.back().get();
    } else if (options.update == TableUpdate::Lazy) {
      lazy.push_back(tables[i]);
    }
  }
  if (!lazy.empty()) lazy_ = std::make_unique<LazyRows>(std::move(lazy));
}

void SparseTables::pull_rows(const std::vector<nn::MicroBatch>& microbatches) {
  for (auto& layer : model_.chain) layer->pull_rows(microbatches);
}

SparseTables::~SparseTables() = default;

std::vector<bool> SparseTables::choose_paths(const std::vector<nn::Param*>& tables, dist::Communicator& tp) {
  const auto all = [&](bool sparse, const std::string& reason) {
    for (const nn::Param* p : tables) choices_.push_back({.table = p->name, .sparse = sparse, .reason = reason});
    if (sparse) partitions_ = set_ ? options_.partitions : choose_partitions(tables, tp);
    return std::vector<bool>(tables.size(), sparse);
  };
  if (options_.mode == SparseMode::On) return all(true, "parallel.sparse = on");
  if (options_.mode == SparseMode::Off) return all(false, "parallel.sparse = off");
  if (group_.size() == 1) return all(false, "auto: one replica, nothing to exchange");
  if (!options_.saved.empty()) return saved_paths(tables, tp);
  at::Tensor too_big = at::full({1}, options_.dense_fits ? 0 : 1, at::kLong);  // any rank's verdict holds
  group_.all_reduce(too_big, dist::ReduceOp::Max);
  tp.all_reduce(too_big, dist::ReduceOp::Max);
  if (too_big.item<int64_t>() != 0) return all(true, "auto: dense tables would not fit in memory");
  return measure_paths(tables, tp);
}

// The saved run's choices, table by table (the tables of this rank must all be among them; else
// they are measured as usual). Every rank of the group decides from the same manifest.
std::vector<bool> SparseTables::saved_paths(const std::vector<nn::Param*>& tables, dist::Communicator& tp) {
  std::vector<bool> out;
  for (const nn::Param* p : tables) {
    const auto it = std::find_if(options_.saved.begin(), options_.saved.end(),
                                 [&](const TableChoice& c) { return c.table == p->name; });
    LOOM_CHECK(it != options_.saved.end(), "[sparse] table {} has no saved choice", p->name);
    choices_.push_back(*it);
    out.push_back(it->sparse);
  }
  if (std::find(out.begin(), out.end(), true) != out.end())
    partitions_ = set_                            ? options_.partitions
                  : options_.saved_partitions > 0 ? options_.saved_partitions
                                                  : choose_partitions(tables, tp);
  return out;
}

// NOTE [Table paths] (replicas/table_trials.h): the trials of both paths, agreed over the group and tp.
std::vector<bool> SparseTables::measure_paths(const std::vector<nn::Param*>& tables, dist::Communicator& tp) {
  const std::vector<TableContext> contexts =
      table_contexts(model_, tables, options_.batch, options_.seq, options_.bucket_elements);
  partitions_ = set_ ? options_.partitions : choose_partitions(tables, tp);
  int64_t companions = 0;  // the tables of one layer share a bucket: its dense rest
  for (const TableContext& c : contexts) companions = std::max(companions, c.companions);
  const std::vector<double> sparse = sparse_trial(tables, partitions_, companions);
  std::vector<at::Tensor> looked_up;
  for (const nn::Param* p : tables) looked_up.push_back(at::zeros({rows_of(*p)}, at::kFloat));
  if (options_.update == TableUpdate::Lazy) record_rows(tables, looked_up, [&] { pull_rows(options_.step0); });
  const auto n = static_cast<int64_t>(tables.size());
  at::Tensor seconds = at::zeros({2 * n}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    const DenseTrial trial{.context = contexts[static_cast<size_t>(i)], .update = options_.update,
                           .adamw = options_.adamw, .dtype = options_.dtype,
                           .looked_up = looked_up[static_cast<size_t>(i)]};
    seconds[i] = sparse[static_cast<size_t>(i)];
    seconds[n + i] = dense_trial_seconds(*tables[static_cast<size_t>(i)], trial, group_);
  }
  group_.all_reduce(seconds, dist::ReduceOp::Max);
  tp.all_reduce(seconds, dist::ReduceOp::Max);
  std::vector<bool> out;
  for (int64_t i = 0; i < n; ++i) {
    const double s = seconds[i].item<double>(), d = seconds[n + i].item<double>();
    out.push_back(s < d);
    choices_.push_back({.table = tables[static_cast<size_t>(i)]->name, .sparse = s < d,
                        .reason = s < d ? "auto: measured sparse < dense" : "auto: measured dense <= sparse",
                        .sparse_ms = s * 1e3, .dense_ms = d * 1e3});
  }
  return out;
}

std::vector<double> SparseTables::sparse_trial(const std::vector<nn::Param*>& tables, int64_t partitions,
                                               int64_t companions) {
  at::Tensor bucket = at::zeros({companions}, at::TensorOptions().dtype(options_.dtype));
  std::vector<std::unique_ptr<parallel::SparseTable>> scratch;
  std::vector<nn::SparseRows*> rows;
  for (nn::Param* p : tables) {
    scratch.push_back(
        std::make_unique<parallel::SparseTable>(*p, group_, partitions, options_.adamw, options_.update));
    scratch.back()->initialise_zeros(options_.dtype);
    rows.push_back(scratch.back().get());
  }
  const StandIns trial(tables, rows);
  std::vector<std::vector<double>> runs(tables.size());
  for (int run = 0; run < 3; ++run) {
    group_.barrier();
    for (auto& t : scratch) t->reset_seconds();
    pull_rows(options_.step0);
    dist::WorkPtr work = companions > 0 ? group_.all_reduce_async(bucket, dist::ReduceOp::Sum) : nullptr;
    for (auto& t : scratch) t->push();
    const auto waited = std::chrono::steady_clock::now();
    if (work) work->wait();
    const double rest = std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count();
    for (auto& t : scratch) t->step(0.0);
    for (size_t i = 0; i < scratch.size(); ++i)
      runs[i].push_back(scratch[i]->seconds() + rest / static_cast<double>(scratch.size()));
  }
  std::vector<double> out;
  for (auto& r : runs) {
    std::sort(r.begin(), r.end());
    out.push_back(r[1]);
  }
  return out;
}

// NOTE [Partition count]: Parallax chooses the number of partitions of its sparse tables from
// short trials fitted to t(P) = a + b / P + c (P - 1): more partitions spread the owners' work
// and the hot rows, each one costs a fixed overhead. Candidates are multiples of the group size
// n (n, 2n, 4n, 8n), so every rank owns the same number of partitions, and the choice is the
// fitted minimum over the multiples of n up to 8n. Each candidate P runs the step-0 exchange
// (pull, push, update) three times on scratch tables of zeros, so the model is untouched; the
// time of P is the sum over tables of their medians, and every rank takes the group's slowest,
// so all fit the same numbers and pick the same P. The partition count never changes the
// numbers trained, to the last bit, only the time: a row's sum is the same on any owner and the
// norm is the same sum over rows (NOTE [Table norms]).
int64_t SparseTables::choose_partitions(const std::vector<nn::Param*>& tables, dist::Communicator& tp) {
  const int64_t n = group_.size();
  if (n == 1) return 1;  // one owner: partitions change nothing
  int64_t rows = std::numeric_limits<int64_t>::max();
  for (const nn::Param* p : tables) rows = std::min(rows, rows_of(*p));
  // Multiples of the group, so that every rank owns as many partitions as the next (what the
  // budget check assumes); a table of fewer rows than ranks gets one partition per row.
  std::vector<int64_t> candidates;
  for (int64_t p : {n, 2 * n, 4 * n, 8 * n})
    if (p <= rows) candidates.push_back(p);
  if (candidates.empty()) return rows;
  at::Tensor seconds = at::zeros({static_cast<int64_t>(candidates.size())}, at::kDouble);
  for (size_t c = 0; c < candidates.size(); ++c) {
    double total = 0;
    for (double s : sparse_trial(tables, candidates[c])) total += s;
    seconds[static_cast<int64_t>(c)] = total;
  }
  group_.all_reduce(seconds, dist::ReduceOp::Max);
  // And over tp: each tp rank's replicas are a group of their own, and a checkpoint records one
  // count for the run, so every group must choose the same (timings differ between groups).
  tp.all_reduce(seconds, dist::ReduceOp::Max);
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

void SparseTables::pull(const std::vector<nn::MicroBatch>& microbatches) {
  if (lazy_)  // the tables on the sparse path pull in the same pass
    lazy_->record([&] { pull_rows(microbatches); }, group_);
  else if (!tables_.empty())
    pull_rows(microbatches);
}

const optim::RowFilter* SparseTables::row_filter() const { return lazy_.get(); }

std::pair<double, double> SparseTables::push() {
  if (lazy_) lazy_->finish();
  if (tables_.empty()) return {0, 0};  // every rank of the group chose alike: none pushes
  double replicated = 0, sharded = 0;
  for (auto& t : tables_) {
    t->push();
    (t->param().value_on("tp").is_shard() ? sharded : replicated) += t->grad_norm_square();
  }
  return {replicated, sharded};
}

double SparseTables::norm_square(const nn::Param& table) const {
  for (const auto& t : tables_)
    if (&t->param() == &table) return t->grad_norm_square();
  throw Error(fmt::format("[sparse] {} is not on the sparse path", table.name));
}

void SparseTables::step(double lr, double clip_factor) {
  for (auto& t : tables_) {
    if (clip_factor != 1.0) t->scale_grads(clip_factor);
    t->step(lr);
  }
}

std::string SparseTables::describe() const {
  if (choices_.empty()) return "";
  std::string line = "tables:";
  const bool uniform = std::all_of(choices_.begin(), choices_.end(), [&](const TableChoice& c) {
    return c.sparse == choices_.front().sparse && c.reason == choices_.front().reason && c.dense_ms == 0;
  });
  if (uniform && choices_.size() > 1) {
    line += fmt::format(" {} {} ({})", choices_.size(), choices_.front().sparse ? "sparse" : "dense",
                        choices_.front().reason);
  } else {
    for (const TableChoice& c : choices_) {
      const std::string times =
          c.dense_ms > 0 ? fmt::format(": sparse {:.2f} ms, dense {:.2f} ms per step", c.sparse_ms, c.dense_ms) : "";
      line += fmt::format(" {} {} ({}{});", c.table, c.sparse ? "sparse" : "dense", c.reason, times);
    }
    if (line.back() == ';') line.pop_back();
  }
  if (tables_.empty()) return line + pin_hint();
  std::string trials;
  for (auto [p, seconds] : trials_) trials += fmt::format(" P={}: {:.2f} ms", p, seconds * 1e3);
  return line + fmt::format("; {} sparse table{} in {} partitions over {} ranks{}", size(), size() == 1 ? "" : "s",
                            partitions_, group_.size(), trials.empty() ? (set_ ? " (set)" : "") : "; trials" + trials) +
         pin_hint();
}

// NOTE [Reproducible table choices]: what "auto" measured changes the speed, and where it could
// change the numbers the run says how to repeat it. The partition count never changes them (NOTE
// [Table norms]; a row's sum is the same on any owner), so it is pinned only for the same speed.
// A table's path changes no bit at a group of two replicas without ZeRO-1 (a dense table's
// all-reduce adds the same two terms the owner adds); with more replicas MPI's all-reduce adds
// them in an order of its own (a tree, or ring chunks by position), and ZeRO-1 cuts a dense
// table's norm at its shard boundaries, so the paths differ in the last bits there: the choice
// is then repeated with parallel.sparse = on / off when every table took one path, or by resuming
// from the run's checkpoint, which records each table's path (NOTE [Resuming]). (Also under
// parallel.grad_dtype = "bfloat16", which rounds a dense table's gradient on the wire and not
// the sparse path's rows.)
std::string SparseTables::pin_hint() const {
  const bool measured = std::any_of(choices_.begin(), choices_.end(), [](const TableChoice& c) { return c.dense_ms > 0; });
  std::string hint;
  if (measured) {
    const bool all_sparse = std::all_of(choices_.begin(), choices_.end(), [](const TableChoice& c) { return c.sparse; });
    const bool all_dense = std::none_of(choices_.begin(), choices_.end(), [](const TableChoice& c) { return c.sparse; });
    hint += all_sparse || all_dense ? fmt::format("; pin the paths with --set parallel.sparse={}", all_sparse ? "on" : "off")
                                    : "; the paths are mixed: a resumed run keeps them";
  }
  if (!trials_.empty() && !tables_.empty())
    hint += fmt::format("; pin P with --set parallel.sparse_partitions={} (it changes only the speed)", partitions_);
  return hint;
}

}  // namespace loom::replicas
