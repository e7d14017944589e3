#pragma once
// Tensor-parallel linear layers over the mesh's tp axis (the building blocks of tensor-parallel
// attention and MLP). Each holds its shard of the full parameter, initialised directly from the
// full tensor's element indices, so rank r's shard equals the same slice of the serial Linear.
//
// ColumnParallelLinear: W [out, in] split along out. Input replicated, output sharded.
//   forward            y_local = x W_local^T + b_local              no communication
//   backward_input     dx = all_reduce_sum_tp(dy_local W_local)     1 all-reduce of x's size
//   backward_weight    W_local += dy_local^T x, b_local += sum dy_local
// With `groups` > 1 the output is `groups` stacked blocks (e.g. q | k | v) and each block is
// split, so a rank holds the same heads of every block: full shape [groups, out/groups, in],
// split along dim 1.
//
// RowParallelLinear: W [out, in] split along in. Input sharded, output replicated.
//   forward            y = all_reduce_sum_tp(x_local W_local^T) + b   1 all-reduce of y's size
//   backward_input     dx_local = dy W_local                          no communication
//   backward_weight    W_local += dy^T x_local, b += sum dy (b is replicated, its gradient equal
//                      on every tp rank)
#include "loom/dist/communicator.h"
#include "loom/nn/param.h"

namespace loom::parallel {

class ColumnParallelLinear {
 public:
  ColumnParallelLinear(const std::string& name, int64_t in_features, int64_t out_features, bool bias,
                       double init_std, dist::Communicator& tp, int64_t groups = 1);

  at::Tensor forward(const at::Tensor& x) const;            // [..., in] -> [..., out / tp]
  at::Tensor backward_input(const at::Tensor& dy) const;    // [..., out / tp] -> [..., in], all-reduced
  // This rank's term of dx, before the all-reduce (for callers that overlap it with compute).
  at::Tensor backward_input_partial(const at::Tensor& dy) const;
  void backward_weight(const at::Tensor& x, const at::Tensor& dy);
  std::vector<nn::Param*> params();
  int64_t local_out() const { return local_out_; }
  double flops(int64_t rows) const { return 2.0 * static_cast<double>(rows * in_ * local_out_); }

  nn::Param weight, bias;

 private:
  dist::Communicator& tp_;
  int64_t in_, local_out_;
};

class RowParallelLinear {
 public:
  RowParallelLinear(const std::string& name, int64_t in_features, int64_t out_features, bool bias,
                    double init_std, dist::Communicator& tp);

  at::Tensor forward(const at::Tensor& x_local) const;      // [..., in / tp] -> [..., out], all-reduced
  // The two halves of forward, for callers that overlap the all-reduce with compute:
  // forward_partial gives this rank's term; after the sum over tp, add_bias completes y in place.
  at::Tensor forward_partial(const at::Tensor& x_local) const;
  void add_bias(at::Tensor& y) const;
  at::Tensor backward_input(const at::Tensor& dy) const;    // [..., out] -> [..., in / tp]
  void backward_weight(const at::Tensor& x_local, const at::Tensor& dy);
  std::vector<nn::Param*> params();
  int64_t local_in() const { return local_in_; }
  double flops(int64_t rows) const { return 2.0 * static_cast<double>(rows * local_in_ * out_); }

  nn::Param weight, bias;

 private:
  dist::Communicator& tp_;
  int64_t out_, local_in_;
};

}  // namespace loom::parallel
