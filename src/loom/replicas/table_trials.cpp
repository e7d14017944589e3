#include "loom/replicas/table_trials.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "loom/core/stats.h"

namespace loom::replicas {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Matrix products of about `flops` (the backward that follows a table), testing `work` between
// them as the reducer tests its buckets between layers. Returns the seconds they took.
double window(double flops, at::ScalarType dtype, dist::Work* work) {
  constexpr int64_t kSide = 256;
  const auto products = static_cast<int64_t>(std::ceil(flops / (2.0 * kSide * kSide * kSide)));
  if (products == 0) return 0;
  const at::Tensor a = at::full({kSide, kSide}, 1e-3, at::TensorOptions().dtype(dtype));
  at::Tensor c = at::empty_like(a);
  const auto start = Clock::now();
  for (int64_t i = 0; i < products; ++i) {
    at::mm_out(c, a, a);
    if (work != nullptr) work->test();
  }
  return since(start);
}

}  // namespace

std::vector<TableContext> table_contexts(const models::Model& model, const std::vector<nn::Param*>& tables,
                                         int64_t batch, int64_t seq, int64_t bucket_elements) {
  std::vector<TableContext> out(tables.size());
  const auto index_of = [&](const nn::Param* p) { return std::find(tables.begin(), tables.end(), p) - tables.begin(); };
  double backward = 0;  // of the layers before this one: they run after it in backward
  for (const auto& layer : model.chain) {
    for (const nn::Param* p : layer->params())
      if (const auto i = index_of(p); i < static_cast<int64_t>(tables.size())) out[static_cast<size_t>(i)].window_flops = backward;
    const nn::Cost cost = layer->cost(batch, seq, 4);
    backward += cost.backward_input_flops + cost.backward_weight_flops;
  }
  std::vector<std::pair<const nn::Param*, int64_t>> bucket;  // the bucket being cut
  int64_t filled = 0;
  const auto close = [&] {
    for (auto [p, numel] : bucket)
      if (const auto i = index_of(p); i < static_cast<int64_t>(tables.size())) out[static_cast<size_t>(i)].companions = filled - numel;
    bucket.clear(), filled = 0;
  };
  for (size_t l = model.chain.size(); l-- > 0;) {
    for (const nn::Param* p : model.chain[l]->params()) {
      if (!bucket.empty() && filled >= std::max<int64_t>(bucket_elements, 1)) close();
      bucket.emplace_back(p, p->numel()), filled += p->numel();
    }
  }
  close();
  return out;
}

at::Tensor row_elements(const at::Tensor& mask, int64_t width) {
  const at::Tensor rows = mask.nonzero().squeeze(1);
  return (rows.unsqueeze(1) * width + at::arange(width, rows.options())).reshape({-1});
}

double dense_trial_seconds(const nn::Param& table, const DenseTrial& trial, dist::Communicator& group) {
  const int64_t width = table.full_shape[1], rows = table.numel() / width;
  const auto options = at::TensorOptions().dtype(trial.dtype);
  at::Tensor bucket = at::zeros({rows * width + trial.context.companions}, options);
  at::Tensor value = at::zeros({rows, width}, options), m = at::zeros_like(value), v = at::zeros_like(value);
  const at::Tensor grad = bucket.narrow(0, 0, rows * width).view({rows, width});
  const double flops = trial.context.window_flops;
  const double alone = std::min(window(flops, trial.dtype, nullptr), window(flops, trial.dtype, nullptr));
  std::vector<double> runs;
  for (int run = 0; run < 3; ++run) {
    group.barrier();
    const auto start = Clock::now();
    grad.zero_();
    const auto reduce = Clock::now();
    dist::WorkPtr work = group.all_reduce_async(bucket, dist::ReduceOp::Sum);
    window(flops, trial.dtype, work.get());
    work->wait();
    const double exposed = std::max(0.0, since(reduce) - alone);
    const auto update = Clock::now();
    if (trial.update == TableUpdate::Lazy) {
      at::Tensor mask = trial.looked_up.clone();
      group.all_reduce(mask, dist::ReduceOp::Max);
      optim::adamw_update_elements(value, grad, m, v, row_elements(mask, width), 0.0, 1.0, 1, trial.adamw);
    } else {
      optim::adamw_update(value, grad, m, v, 0.0, 1.0, 1, trial.adamw);
    }
    runs.push_back(std::chrono::duration<double>(reduce - start).count() + exposed + since(update));
  }
  return median(runs);
}

}  // namespace loom::replicas
