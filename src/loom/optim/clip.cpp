#include "loom/optim/clip.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "loom/core/error.h"

namespace loom::optim {

at::Tensor row_norm_squares(const at::Tensor& rows) {
  TORCH_CHECK(rows.dim() == 2, "row_norm_squares needs a [rows, d] tensor");
  if (!rows.is_cpu()) return rows.to(at::kDouble).square().sum(1);  // a GPU's: its reduction kernel
  const at::Tensor t = rows.contiguous();
  at::Tensor out = at::empty({t.size(0)}, t.options().dtype(at::kDouble));
  const int64_t width = t.size(1);
  double* sums = out.data_ptr<double>();
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "row_norm_squares", [&] {
    const scalar_t* data = t.data_ptr<scalar_t>();
    at::parallel_for(0, t.size(0), 64, [&](int64_t begin, int64_t end) {  // rows apart: any split
      for (int64_t r = begin; r < end; ++r) {
        double sum = 0;
        for (int64_t j = 0; j < width; ++j) {
          const auto x = static_cast<double>(data[r * width + j]);
          sum += x * x;
        }
        sums[r] = sum;
      }
    });
  });
  return out;
}

double sum_in_order(const at::Tensor& values) {
  const at::Tensor t = values.to(at::kCPU, at::kDouble).contiguous();
  const double* v = t.data_ptr<double>();
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += v[i];
  return sum;
}

double grad_norm_square(const nn::Param& param) {
  if (param.embedding && param.grad.dim() == 2) return sum_in_order(row_norm_squares(param.grad));
  const double n = param.grad.norm().item<double>();
  return n * n;
}

std::pair<double, double> grad_norm_squares(const std::vector<nn::Param*>& params) {
  double replicated = 0, sharded = 0;
  for (const nn::Param* p : params) {
    LOOM_CHECK(!p->value_on("ep").is_shard(), "[clip] {} is sharded over ep; its norm needs the expert group", p->name);
    (p->value_on("tp").is_shard() ? sharded : replicated) += grad_norm_square(*p);
  }
  return {replicated, sharded};
}

double combine_norm_squares(double replicated, double sharded, dist::Communicator& tp, dist::Communicator* pp) {
  if (tp.size() > 1) {
    at::Tensor t = at::full({1}, sharded, at::TensorOptions().dtype(at::kDouble));
    tp.all_reduce(t, dist::ReduceOp::Sum);
    sharded = t.item<double>();
  }
  double total = replicated + sharded;
  if (pp != nullptr && pp->size() > 1) {
    at::Tensor t = at::full({1}, total, at::TensorOptions().dtype(at::kDouble));
    pp->all_reduce(t, dist::ReduceOp::Sum);
    total = t.item<double>();
  }
  return std::sqrt(total);
}

double global_grad_norm(const std::vector<nn::Param*>& params, dist::Communicator& tp, dist::Communicator* pp) {
  auto [replicated, sharded] = grad_norm_squares(params);
  return combine_norm_squares(replicated, sharded, tp, pp);
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm, dist::Communicator& tp,
                      dist::Communicator* pp, std::pair<double, double> extra) {
  auto [replicated, sharded] = grad_norm_squares(params);
  const double norm = combine_norm_squares(replicated + extra.first, sharded + extra.second, tp, pp);
  const double factor = clip_factor(norm, max_norm);
  if (factor != 1.0)
    for (nn::Param* p : params) p->grad.mul_(factor);
  return norm;
}

double sharded_grad_norm(std::vector<nn::Param>& parts, dist::Communicator& owners, std::pair<double, double> extra,
                         dist::Communicator& tp, dist::Communicator* pp) {
  std::vector<nn::Param*> pointers;
  for (nn::Param& p : parts) pointers.push_back(&p);
  const auto [replicated, sharded] = grad_norm_squares(pointers);
  at::Tensor sums = at::tensor({replicated, sharded}, at::TensorOptions().dtype(at::kDouble));
  owners.all_reduce(sums, dist::ReduceOp::Sum);
  return combine_norm_squares(sums[0].item<double>() + extra.first, sums[1].item<double>() + extra.second, tp, pp);
}

}  // namespace loom::optim
