// Tensor-parallel linear layers against the serial Linear (float64): each rank's outputs,
// input gradients and weight-gradient shards equal the matching slices of the serial ones, and
// each layer runs exactly the one all-reduce its header promises.
#include <gtest/gtest.h>

#include "loom/core/rng.h"
#include "loom/dist/recording_communicator.h"
#include "loom/nn/linear.h"
#include "loom/parallel/tensor_parallel_linear.h"
#include "unit/layer_check.h"
#include "world.h"

namespace loom::parallel {
namespace {

using test::world;

constexpr int64_t kIn = 8, kOut = 12, kRows = 10;  // kOut / 3 divisible by tp = 1, 2, 4

// The same values on every rank: drawn from (name, element) like parameters.
at::Tensor shared_randn(const std::string& name, std::vector<int64_t> shape) {
  return normal_tensor(stream_key(99, name), shape, {}, 1.0, at::kDouble);
}

nn::Linear serial_linear() {
  nn::Linear l("layer", kIn, kOut, true, 0.5);
  for (nn::Param* p : l.params()) nn::initialise(*p, 7, at::kDouble);
  l.bias.value.normal_(0.0, 0.5, at::make_generator<at::CPUGeneratorImpl>(1));
  return l;
}

class TensorParallelLinear : public ::testing::TestWithParam<int64_t> {};  // groups

TEST_P(TensorParallelLinear, ColumnParallelMatchesSlicesOfTheSerialLayer) {
  const int64_t groups = GetParam(), tp = world().size(), r = world().rank();
  if ((kOut / groups) % tp != 0) GTEST_SKIP();
  nn::Linear serial = serial_linear();
  dist::CommStats stats;
  dist::RecordingCommunicator comm(world(), stats);
  ColumnParallelLinear layer("layer", kIn, kOut, true, 0.5, comm, groups);
  for (nn::Param* p : layer.params()) nn::initialise(*p, 7, at::kDouble);
  // The bias is zero-initialised; give both the same non-zero values to see it travel.
  const int64_t per = kOut / groups, local = per / tp;
  auto my_slice = [&](const at::Tensor& full) {  // this rank's columns of each group
    const auto lead = full.sizes().slice(0, full.dim() - 1).vec();
    std::vector<int64_t> grouped = lead;
    grouped.push_back(groups), grouped.push_back(per);
    std::vector<int64_t> flat = lead;
    flat.push_back(groups * local);
    return full.reshape(grouped).narrow(-1, r * local, local).reshape(flat);
  };
  layer.bias.value.view({-1}).copy_(my_slice(serial.bias.value));

  const at::Tensor x = shared_randn("x", {kRows, kIn}), dy = shared_randn("dy", {kRows, kOut});
  const at::Tensor y = layer.forward(x), dx = layer.backward_input(my_slice(dy));
  layer.backward_weight(x, my_slice(dy));
  serial.backward_weight(x, dy);

  EXPECT_TENSOR_NEAR(y, my_slice(serial.forward(x)), 1e-12);
  EXPECT_TENSOR_NEAR(dx, serial.backward_input(dy), 1e-12);
  EXPECT_TENSOR_NEAR(layer.weight.grad.reshape({-1, kIn}), my_slice(serial.weight.grad.t()).t(), 1e-12);
  EXPECT_TENSOR_NEAR(layer.bias.grad.reshape({-1}), my_slice(serial.bias.grad), 1e-12);
  if (tp > 1) {
    ASSERT_EQ(stats.records.size(), 1u) << "column-parallel: one all-reduce, in backward_input";
    EXPECT_EQ(stats.records[0], (dist::CommRecord{"all_reduce", "world", kRows * kIn * 8}));
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, TensorParallelLinear, ::testing::Values(1, 3),
                         [](const auto& info) { return "groups" + std::to_string(info.param); });

TEST(TensorParallelLinearRow, RowParallelMatchesSlicesOfTheSerialLayer) {
  const int64_t tp = world().size(), r = world().rank();
  // Row-parallel splits the inputs: use the serial layer's transpose shape (in = kOut).
  nn::Linear serial("layer", kOut, kIn, true, 0.5);
  for (nn::Param* p : serial.params()) nn::initialise(*p, 7, at::kDouble);
  serial.bias.value.normal_(0.0, 0.5, at::make_generator<at::CPUGeneratorImpl>(1));
  dist::CommStats stats;
  dist::RecordingCommunicator comm(world(), stats);
  RowParallelLinear layer("layer", kOut, kIn, true, 0.5, comm);
  for (nn::Param* p : layer.params()) nn::initialise(*p, 7, at::kDouble);
  layer.bias.value.copy_(serial.bias.value);
  const int64_t local = kOut / tp;

  const at::Tensor x = shared_randn("x", {kRows, kOut}), dy = shared_randn("dy", {kRows, kIn});
  const at::Tensor x_local = x.narrow(1, r * local, local).contiguous();
  const at::Tensor y = layer.forward(x_local), dx = layer.backward_input(dy);
  layer.backward_weight(x_local, dy);
  serial.backward_weight(x, dy);

  EXPECT_TENSOR_NEAR(y, serial.forward(x), 1e-12);
  EXPECT_TENSOR_NEAR(dx, serial.backward_input(dy).narrow(1, r * local, local), 1e-12);
  EXPECT_TENSOR_NEAR(layer.weight.grad, serial.weight.grad.narrow(1, r * local, local), 1e-12);
  EXPECT_TENSOR_NEAR(layer.bias.grad, serial.bias.grad, 1e-12);
  if (tp > 1) {
    ASSERT_EQ(stats.records.size(), 1u) << "row-parallel: one all-reduce, in forward";
    EXPECT_EQ(stats.records[0], (dist::CommRecord{"all_reduce", "world", kRows * kIn * 8}));
  }
}

}  // namespace
}  // namespace loom::parallel
