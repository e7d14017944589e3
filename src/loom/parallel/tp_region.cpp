#include "loom/parallel/tp_region.h"

namespace loom::parallel {
namespace {

// t's shape [b, s, rest...] with s replaced by `seq`.
std::vector<int64_t> with_seq(const at::Tensor& t, int64_t seq) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[1] = seq;
  return shape;
}

}  // namespace

PendingSequenceGather::PendingSequenceGather(dist::Communicator& tp, const at::Tensor& local) {
  LOOM_CHECK(local.dim() >= 2 && local.is_contiguous(), "[tp] a sequence gather takes a contiguous [batch, seq, ...]");
  std::vector<int64_t> shape = local.sizes().vec();
  shape.insert(shape.begin(), tp.size());
  blocks_ = at::empty(shape, local.options());
  work_ = tp.all_gather_async(local, blocks_);
}

at::Tensor PendingSequenceGather::wait() {
  work_->wait();
  // [tp, b, T/tp, ...] -> [b, tp, T/tp, ...] -> [b, T, ...]: a view when b = 1, else one copy.
  const at::Tensor& b = blocks_;
  std::vector<int64_t> shape = b.sizes().vec();
  shape.erase(shape.begin());
  shape[1] *= b.size(0);
  return b.transpose(0, 1).reshape(shape);
}

at::Tensor gather_sequence(dist::Communicator& tp, const at::Tensor& local) {
  if (tp.size() == 1) return local;
  return PendingSequenceGather(tp, local.contiguous()).wait();
}

namespace {

// The partial [b, T, ...] laid out as tp blocks [tp, b, T/tp, ...], and the output it scatters to.
std::pair<at::Tensor, at::Tensor> scatter_blocks(dist::Communicator& tp, const at::Tensor& partial) {
  const int64_t n = tp.size(), seq = partial.size(1);
  LOOM_CHECK(seq % n == 0, "[tp] a sequence of {} tokens does not split over tp = {}", seq, n);
  std::vector<int64_t> split = partial.sizes().vec();
  split[1] = seq / n;
  split.insert(split.begin() + 1, n);  // [b, tp, T/tp, ...]
  at::Tensor blocks = partial.reshape(split).transpose(0, 1).contiguous();
  return {blocks, at::empty(with_seq(partial, seq / n), partial.options())};
}

}  // namespace

at::Tensor reduce_scatter_sequence(dist::Communicator& tp, const at::Tensor& partial) {
  if (tp.size() == 1) return partial;
  auto [blocks, out] = scatter_blocks(tp, partial);
  tp.reduce_scatter(blocks, out, dist::ReduceOp::Sum);
  return out;
}

TpRegion::TpRegion(dist::Communicator& tp, bool sequence) : tp_(tp), sequence_(sequence && tp.size() > 1) {}

void TpRegion::progress() {
  for (auto& g : gathers_) g.test();
  for (auto& work : reductions_) work->test();
}

void TpRegion::enter(const at::Tensor& outside) {
  if (!sequence_) {
    ready_.push_back(outside);
    return;
  }
  progress();
  gathers_.emplace_back(tp_, outside.contiguous());
}

void TpRegion::enter_chunks(const at::Tensor& outside, int64_t chunks) {
  for (int64_t c = 0; c < chunks; ++c) {
    const auto [first, rows] = chunk_rows(outside.size(0), chunks, c);
    enter(outside.narrow(0, first, rows));
  }
}

at::Tensor TpRegion::next_entered() {
  at::Tensor t;
  if (!sequence_) {
    LOOM_CHECK(!ready_.empty(), "[tp] region: nothing entered");
    t = std::move(ready_.front());
    ready_.pop_front();
  } else {
    LOOM_CHECK(!gathers_.empty(), "[tp] region: nothing entered");
    t = gathers_.front().wait();
    gathers_.pop_front();
  }
  return t;
}

void TpRegion::leave(at::Tensor partial) {
  if (tp_.size() == 1) {
    results_.push_back(std::move(partial));
    return;
  }
  progress();
  if (!sequence_) {
    at::Tensor t = partial.contiguous();
    reductions_.push_back(tp_.all_reduce_async(t, dist::ReduceOp::Sum));
    results_.push_back(std::move(t));
    return;
  }
  auto [blocks, out] = scatter_blocks(tp_, partial);
  reductions_.push_back(tp_.reduce_scatter_async(blocks, out, dist::ReduceOp::Sum));
  results_.push_back(std::move(out));
}

at::Tensor TpRegion::finish() {
  for (auto& work : reductions_) work->wait();
  reductions_.clear();
  at::Tensor joined = results_.size() == 1 ? std::move(results_[0]) : at::cat(results_, 0);
  results_.clear();
  return joined;
}

void store_chunk(at::Tensor& whole, const at::Tensor& part, int64_t dim, int64_t first, int64_t chunks) {
  if (chunks == 1) {
    whole = part;
    return;
  }
  if (!whole.defined()) {
    std::vector<int64_t> shape = part.sizes().vec();
    shape[dim] *= chunks;
    whole = at::empty(shape, part.options());
  }
  whole.narrow(dim, first, part.size(dim)).copy_(part);
}

SequenceGradReducer::SequenceGradReducer(const std::vector<std::vector<nn::Param*>>& layer_params,
                                         dist::Communicator& tp)
    : tp_(tp) {
  for (const auto& params : layer_params) {
    auto& mine = partial_.emplace_back();
    for (nn::Param* p : params)
      if (p->grad_on("tp").is_partial() && tp.size() > 1) mine.push_back(p);
  }
}

void SequenceGradReducer::layer_done(size_t layer) {
  if (layer >= partial_.size() || partial_[layer].empty()) return;
  // Each run of gradients lying side by side in one buffer (a layer's experts in their flat
  // buffer, a norm's gain and bias) is summed in place, in one all-reduce: no packed copy.
  const auto& params = partial_[layer];
  for (size_t first = 0; first < params.size();) {
    const at::Tensor& head = params[first]->grad;
    int64_t total = head.numel();
    size_t end = first + 1;
    for (; end < params.size(); ++end) {
      const at::Tensor& g = params[end]->grad;
      const char* expected = static_cast<const char*>(head.data_ptr()) + total * head.element_size();
      if (!head.is_contiguous() || !g.is_contiguous() || g.scalar_type() != head.scalar_type() ||
          static_cast<const char*>(g.data_ptr()) != expected)
        break;
      total += g.numel();
    }
    if (head.is_contiguous()) {
      at::Tensor run = head.as_strided({total}, {1});
      tp_.all_reduce(run, dist::ReduceOp::Sum);
    } else {
      at::Tensor copy = head.contiguous();
      tp_.all_reduce(copy, dist::ReduceOp::Sum);
      params[first]->grad.copy_(copy);
    }
    first = end;
  }
}

}  // namespace loom::parallel
