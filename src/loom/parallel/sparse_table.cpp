#include "loom/parallel/sparse_table.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/optim/clip.h"

namespace loom::parallel {
namespace {

const auto kLong = at::TensorOptions().dtype(at::kLong);

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::vector<int64_t> times(const std::vector<int64_t>& counts, int64_t width) {
  std::vector<int64_t> out;
  for (int64_t c : counts) out.push_back(c * width);
  return out;
}

int64_t total(const std::vector<int64_t>& counts) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

// The entries of `ids` that are not -1 (and `rows` alongside, when given).
at::Tensor valid_ids(const at::Tensor& ids, at::Tensor* rows = nullptr) {
  const at::Tensor flat = ids.reshape({-1}).contiguous();
  const at::Tensor valid = flat.ge(0);
  if (valid.all().item<bool>()) return flat;
  const at::Tensor keep = valid.nonzero().squeeze(1);
  if (rows != nullptr) *rows = rows->index_select(0, keep);
  return flat.index_select(0, keep);
}

// Adds the seconds the scope takes to `total`.
class Stopwatch {
 public:
  explicit Stopwatch(double& total) : total_(total) {}
  ~Stopwatch() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

std::vector<RowPartition> partition_rows(int64_t rows, int64_t partitions, int ranks) {
  LOOM_CHECK(partitions >= 1 && partitions <= rows && ranks >= 1, "[sparse] {} partitions of {} rows over {} ranks",
             partitions, rows, ranks);
  std::vector<RowPartition> out;
  for (int64_t k = 0; k < partitions; ++k)
    out.push_back({.begin = k * rows / partitions, .end = (k + 1) * rows / partitions,
                   .owner = static_cast<int>(k % ranks)});
  return out;
}

SparseTable::SparseTable(nn::Param& param, dist::Communicator& group, int64_t partitions, optim::AdamWOptions options,
                         TableUpdate update)
    : param_(param), group_(group), options_(options), update_(update) {
  options_.lazy_rows = nullptr;  // the owner knows its touched rows itself
  LOOM_CHECK(param.full_shape.size() == 2, "[sparse] {} is not a table", param.name);
  const Shard part = param.part();  // a vocabulary split over tp: this rank's rows
  LOOM_CHECK(part.dim <= 0, "[sparse] {} is sharded along its width; a sparse table splits its rows", param.name);
  rows_ = part.dim == 0 ? part.length : param.full_shape[0];
  row_offset_ = part.dim == 0 ? part.start : 0;
  width_ = param.full_shape[1];
  partitions_ = partition_rows(rows_, partitions, group.size());
  std::vector<int64_t> begin, owner, offset;
  std::vector<int64_t> held(static_cast<size_t>(group.size()), 0);
  for (const RowPartition& p : partitions_) {
    begin.push_back(p.begin);
    owner.push_back(p.owner);
    offset.push_back(held[static_cast<size_t>(p.owner)]);
    held[static_cast<size_t>(p.owner)] += p.end - p.begin;
  }
  part_begin_ = at::tensor(begin, kLong), part_owner_ = at::tensor(owner, kLong), part_offset_ = at::tensor(offset, kLong);
}

void SparseTable::initialise(uint64_t seed, at::ScalarType dtype) {
  std::vector<at::Tensor> parts;
  for (const RowPartition& p : partitions_) {
    if (p.owner != group_.rank()) continue;
    const Shard rows{.dim = 0, .start = row_offset_ + p.begin, .length = p.end - p.begin};
    if (param_.init == nn::Init::Normal)
      parts.push_back(normal_tensor(stream_key(seed, param_.name), param_.full_shape, rows, param_.init_std, dtype));
    else
      parts.push_back(at::full({rows.length, width_}, param_.init == nn::Init::Ones ? 1.0 : 0.0,
                               at::TensorOptions().dtype(dtype)));
    nn::zero_padding(param_, parts.back(), rows.start);
  }
  owned_ = parts.empty() ? at::empty({0, width_}, at::TensorOptions().dtype(dtype)) : at::cat(parts);
  m_ = at::zeros_like(owned_);
  v_ = at::zeros_like(owned_);
  step_ = 0;
}

std::vector<std::pair<int64_t, int64_t>> SparseTable::owned_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const RowPartition& p : partitions_)
    if (p.owner == group_.rank()) out.emplace_back(row_offset_ + p.begin, p.end - p.begin);
  return out;
}

void SparseTable::initialise_zeros(at::ScalarType dtype) {
  int64_t n = 0;
  for (const RowPartition& p : partitions_)
    if (p.owner == group_.rank()) n += p.end - p.begin;
  owned_ = at::zeros({n, width_}, at::TensorOptions().dtype(dtype));
  m_ = at::zeros_like(owned_);
  v_ = at::zeros_like(owned_);
  step_ = 0;
}

at::Tensor SparseTable::partition_of(const at::Tensor& rows) const {
  return at::searchsorted(part_begin_, rows, /*out_int32=*/false, /*right=*/true).sub_(1);
}

at::Tensor SparseTable::owned_index(const at::Tensor& rows) const {
  const at::Tensor k = partition_of(rows);
  return part_offset_.index_select(0, k) + (rows - part_begin_.index_select(0, k));
}

void SparseTable::pull(const at::Tensor& ids) {
  const Stopwatch watch(seconds_);
  const at::Tensor rows = valid_ids(ids);
  if (rows.numel() > 0) {
    const int64_t top = rows.max().item<int64_t>();
    LOOM_CHECK(top < rows_, "[sparse] {}: row id {} is out of range for a table of {} rows", param_.name, top, rows_);
  }
  need_ = std::get<0>(at::_unique(rows, /*sorted=*/true));
  const auto ranks = group_.size();
  const at::Tensor dest = part_owner_.index_select(0, partition_of(need_));
  order_ = std::get<1>(at::sort(dest, /*stable=*/true, 0, false));
  send_counts_ = to_vector(at::bincount(dest, {}, ranks));
  at::Tensor counts = at::tensor(send_counts_, kLong), incoming = at::empty({ranks}, kLong);
  group_.all_to_all(counts, incoming);
  recv_counts_ = to_vector(incoming);
  // The ids, to their owners; the owners' rows, back.
  const at::Tensor asked = need_.index_select(0, order_);
  served_ = at::empty({total(recv_counts_)}, kLong);
  group_.all_to_allv(asked, send_counts_, served_, recv_counts_);
  const at::Tensor values = owned_.index_select(0, owned_index(served_));
  at::Tensor back = at::empty({need_.numel(), width_}, owned_.options());
  group_.all_to_allv(values, times(recv_counts_, width_), back, times(send_counts_, width_));
  pulled_ = at::empty_like(back).index_copy_(0, order_, back);
  grads_ = at::zeros_like(pulled_);
}

at::Tensor SparseTable::lookup(const at::Tensor& ids) const {
  const at::Tensor flat = ids.reshape({-1}).contiguous();
  const int64_t n = need_.numel();
  if (n == 0) return at::zeros({flat.numel(), width_}, owned_.options());
  at::Tensor rows = pulled_.index_select(0, at::searchsorted(need_, flat).clamp_max_(n - 1));
  const at::Tensor valid = flat.ge(0);
  if (!valid.all().item<bool>()) rows.mul_(valid.unsqueeze(1).to(rows.scalar_type()));
  return rows;
}

void SparseTable::accumulate(const at::Tensor& ids, const at::Tensor& grads) {
  at::Tensor g = grads.reshape({-1, width_});
  const at::Tensor rows = valid_ids(ids, &g);
  if (rows.numel() == 0) return;
  grads_.index_add_(0, at::searchsorted(need_, rows), g);
}

void SparseTable::push() {
  const Stopwatch watch(seconds_);
  const at::Tensor sent = grads_.index_select(0, order_);
  at::Tensor received = at::empty({served_.numel(), width_}, grads_.options());
  group_.all_to_allv(sent, times(send_counts_, width_), received, times(recv_counts_, width_));
  // Each row's parts arrive in rank order and index_add_ adds them in index order, so a row's sum
  // is 0 + g_0 + g_1 + ... whichever owner holds it.
  auto [touched, inverse] = at::_unique(served_, /*sorted=*/true, /*return_inverse=*/true);
  touched_ = touched;
  touched_index_ = owned_index(touched_);
  touched_grad_ = at::zeros({touched_.numel(), width_}, grads_.options()).index_add_(0, inverse, received);
  pulled_ = grads_ = served_ = at::Tensor();
  norm_square_ = gather_norm_square();
}

// NOTE [Table norms] (optim/clip.h): (row, square) of every owner's touched rows to every rank,
// in row order, where a dense table's sum adds the same squares (and 0.0 for the untouched rows).
// Two small all-gathers: the counts, then 16 bytes per touched row, which every rank receives
// (SPARSE_ANALYSIS.md weighs it against the push as the group grows).
double SparseTable::gather_norm_square() const {
  const int ranks = group_.size();
  const int64_t mine = touched_.numel();
  at::Tensor counts = at::empty({ranks}, kLong);
  group_.all_gather(at::full({1}, mine, kLong), counts);
  const int64_t most = std::max<int64_t>(counts.max().item<int64_t>(), 1);
  at::Tensor pairs = at::zeros({most, 2}, at::TensorOptions().dtype(at::kDouble));  // (row, square)
  if (mine > 0) {
    pairs.narrow(0, 0, mine).select(1, 0).copy_(touched_);  // rows < 2^53: exact in double
    pairs.narrow(0, 0, mine).select(1, 1).copy_(optim::row_norm_squares(touched_grad_));
  }
  at::Tensor all = at::empty({ranks * most, 2}, pairs.options());
  group_.all_gather(pairs, all);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < ranks; ++r) parts.push_back(all.narrow(0, r * most, counts[r].item<int64_t>()));
  const at::Tensor rows = at::cat(parts);
  const at::Tensor order = std::get<1>(at::sort(rows.select(1, 0)));  // every row once: a total order
  return optim::sum_in_order(rows.select(1, 1).index_select(0, order));
}

void SparseTable::scale_grads(double factor) {
  if (touched_grad_.defined()) touched_grad_.mul_(factor);
}

void SparseTable::step(double lr) {
  const Stopwatch watch(seconds_);
  ++step_;
  const double decay = param_.weight_decay ? 1.0 - lr * options_.weight_decay : 1.0;
  const bool touched = touched_.defined() && touched_.numel() > 0;
  if (update_ == TableUpdate::Dense) {  // every owned row; untouched ones see a zero gradient
    at::Tensor grad = at::zeros_like(owned_);
    if (touched) grad.index_copy_(0, touched_index_, touched_grad_);
    optim::adamw_update(owned_, grad, m_, v_, lr, decay, step_, options_);
  } else if (touched) {
    at::Tensor value = owned_.index_select(0, touched_index_), m = m_.index_select(0, touched_index_),
               v = v_.index_select(0, touched_index_);
    optim::adamw_update(value, touched_grad_, m, v, lr, decay, step_, options_);
    owned_.index_copy_(0, touched_index_, value);
    m_.index_copy_(0, touched_index_, m);
    v_.index_copy_(0, touched_index_, v);
  }
  touched_ = touched_index_ = touched_grad_ = at::Tensor();
}

at::Tensor SparseTable::gather_full() const {
  const int ranks = group_.size();
  int64_t most = 0;
  std::vector<int64_t> held(static_cast<size_t>(ranks), 0);
  for (const RowPartition& p : partitions_) most = std::max(most, held[static_cast<size_t>(p.owner)] += p.end - p.begin);
  at::Tensor mine = at::zeros({most, width_}, owned_.options());
  mine.narrow(0, 0, owned_.size(0)).copy_(owned_);
  at::Tensor all = at::empty({ranks * most, width_}, owned_.options());
  group_.all_gather(mine, all);
  at::Tensor full = at::empty({rows_, width_}, owned_.options());
  std::fill(held.begin(), held.end(), 0);
  for (const RowPartition& p : partitions_) {
    int64_t& at = held[static_cast<size_t>(p.owner)];
    full.narrow(0, p.begin, p.end - p.begin).copy_(all.narrow(0, p.owner * most + at, p.end - p.begin));
    at += p.end - p.begin;
  }
  return full;
}

double PartitionCost::at(int64_t partitions) const {
  const auto p = static_cast<double>(partitions);
  return a + b / p + c * (p - 1);
}

PartitionCost fit_partition_cost(const std::vector<int64_t>& partitions, const std::vector<double>& seconds) {
  LOOM_CHECK(partitions.size() == seconds.size() && partitions.size() >= 3, "[sparse] fitting t(P) needs 3 trials");
  // Normal equations of the least-squares fit over the features (1, 1/P, P - 1).
  double ata[3][3] = {}, atb[3] = {};
  for (size_t i = 0; i < partitions.size(); ++i) {
    const auto p = static_cast<double>(partitions[i]);
    const double f[3] = {1.0, 1.0 / p, p - 1.0};
    for (int r = 0; r < 3; ++r) {
      atb[r] += f[r] * seconds[i];
      for (int c = 0; c < 3; ++c) ata[r][c] += f[r] * f[c];
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r)
      if (std::abs(ata[r][col]) > std::abs(ata[pivot][col])) pivot = r;
    std::swap(ata[col], ata[pivot]);
    std::swap(atb[col], atb[pivot]);
    LOOM_CHECK(std::abs(ata[col][col]) > 1e-300, "[sparse] the partition trials do not determine t(P)");
    for (int r = col + 1; r < 3; ++r) {
      const double f = ata[r][col] / ata[col][col];
      for (int c = col; c < 3; ++c) ata[r][c] -= f * ata[col][c];
      atb[r] -= f * atb[col];
    }
  }
  double x[3];
  for (int r = 2; r >= 0; --r) {
    double s = atb[r];
    for (int c = r + 1; c < 3; ++c) s -= ata[r][c] * x[c];
    x[r] = s / ata[r][r];
  }
  return {x[0], x[1], x[2]};
}

int64_t best_partition_count(const PartitionCost& cost, int64_t max_partitions, int64_t multiple) {
  int64_t best = multiple;
  for (int64_t p = 2 * multiple; p <= max_partitions; p += multiple)
    if (cost.at(p) < cost.at(best)) best = p;
  return best;
}

}  // namespace loom::parallel
