#pragma once
// The model is a flat chain of layers, each with an explicit backward split in two:
//   forward(x)           -> y, saving in `Saved` what backward needs
//   backward_input(dy)   -> dx, keeping in `Saved` what the weight gradient needs
//   backward_weight()    -> accumulates into each Param::grad, then releases `Saved`
// Splitting B (input gradient) from W (weight gradient) is what zero-bubble pipeline schedules
// need; knowing what is saved is what memory planning needs. The chain's first layer takes token
// ids [batch, seq] (int64); its last returns the micro-batch's loss contribution as a 0-d tensor
// and takes an undefined `dy`.
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/options.h"
#include "loom/nn/param.h"

namespace loom::nn {

// What a micro-batch brings besides the activations flowing through the chain.
struct MicroBatch {
  at::Tensor tokens;   // [batch, seq] int64 (DLRM: [batch, tables x bag] row ids)
  at::Tensor targets;  // [batch, seq] int64 (DLRM: [batch] click labels 0 / 1)
  at::Tensor dense;    // DLRM: [batch, dense features] float64; undefined for a GPT
  // Each token's loss is multiplied by this, so that summing the micro-batches' contributions
  // gives the mean over every token of the global batch, whatever the micro-batch split.
  double loss_scale = 1.0;

  // The same micro-batch with its tensors on `device` (itself when they are there already).
  MicroBatch to(const at::Device& device) const {
    MicroBatch out = *this;
    for (at::Tensor* t : {&out.tokens, &out.targets, &out.dense})
      if (t->defined()) *t = t->to(device);
    return out;
  }
};

// Analytic cost of one layer for one micro-batch: model FLOPs (multiply-add = 2) and bytes.
// A collective a layer runs inside one pass over one micro-batch, on its tensor-, sequence- or
// expert-parallel group: `count` calls of `bytes` each (all_reduce's tensor, all_gather's
// output, reduce_scatter's input, all_to_all's input, one ring step's message). A device cost
// model (plan/cluster.h) prices them by the group's links.
using CommOp = loom::CommOp;  // core/options.h, with its names
enum class CommAxis : uint8_t { Tp, Sp, Ep };
enum class CommPass : uint8_t { Forward, BackwardInput };
struct CommUse {
  CommOp op = CommOp::AllReduce;
  CommAxis axis = CommAxis::Tp;
  CommPass pass = CommPass::Forward;
  double bytes = 0;
  int64_t count = 1;
  bool overlapped = false;  // issued asynchronously beside the layer's compute (tp_overlap, ring)
  bool operator==(const CommUse&) const = default;
};

struct Cost {
  double forward_flops = 0;
  double backward_input_flops = 0;
  double backward_weight_flops = 0;
  double saved_bytes = 0;  // activations kept from forward to backward
  double param_bytes = 0;
  // Temporaries beyond what is saved, at the layer's largest moment (the head's logits while the
  // loss and its gradient are formed): what a stage's peak adds for its busiest layer.
  double workspace_bytes = 0;
  // For a device's cost model (NOTE [Cluster cost model]): the attention kernel's share of
  // forward_flops (backward_input holds twice it), the smallest dimension of the layer's largest
  // GEMM on this rank (small GEMMs run below peak), the bytes its non-GEMM kernels read and write
  // in a forward (norms, bias and activation functions, residual adds, lookups; a backward moves
  // about twice them), and its collectives. NOTE [Kernel fusion]: score_bytes are the attention
  // scores' passes through memory, which a fused attention kernel does not make; fusable_bytes is
  // the part of elementwise_bytes that fused elementwise kernels do not move.
  double attention_flops = 0;
  double gemm_dim = 0;
  double elementwise_bytes = 0;
  double score_bytes = 0;
  double fusable_bytes = 0;
  std::vector<CommUse> comm;
  Cost& operator+=(const Cost& o);
};

// Visits a tensor by name; it may replace the tensor (by a copy in host memory, say). Undefined
// tensors (not kept at this moment) are visited too.
using TensorVisitor = std::function<void(std::string_view name, at::Tensor& tensor)>;

// State a layer keeps between its forward and backward calls for one micro-batch.
struct SavedState {
  virtual ~SavedState() = default;
  // Every tensor the state holds, so that a memory policy can move them (to host memory and back)
  // without knowing the layer. No default: a state that forgot one would keep it in place unseen.
  virtual void for_each_tensor(const TensorVisitor& visit) = 0;
};

class Saved {
 public:
  template <class State>
  State& emplace() {
    auto state = std::make_unique<State>();
    State& ref = *state;
    state_ = std::move(state);
    return ref;
  }
  template <class State>
  State& get() {
    return static_cast<State&>(*state_);
  }
  bool empty() const { return state_ == nullptr; }
  void clear() { state_.reset(); }
  void for_each_tensor(const TensorVisitor& visit) {
    if (state_) state_->for_each_tensor(visit);
  }

 private:
  std::unique_ptr<SavedState> state_;
};

// State that training changes but no optimizer steps (the experts' balance bias: NOTE [Expert
// balance]): the same on every rank holding its layer, saved whole with the checkpoint.
struct Buffer {
  std::string name;
  at::Tensor value;  // float64 on the host
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  virtual at::Tensor forward(const at::Tensor& x, const MicroBatch& mb, Saved& saved) = 0;
  virtual at::Tensor backward_input(const at::Tensor& dy, Saved& saved) = 0;
  virtual void backward_weight(Saved& saved) = 0;
  virtual std::vector<Param*> params() = 0;
  // The parameters its passes read: its own, and any it shares with another layer that owns them
  // (a tied head reads the embedding's token table). What must be whole before a pass (NOTE
  // [Sharded parameters]).
  virtual std::vector<Param*> reads() { return params(); }
  // Layers with tables on the sparse path (Param::sparse) fetch the rows this step's micro-batches
  // look up, before any forward: a collective over the tables' replica group
  // (NOTE [Sparse exchange]). Every rank of the group calls it for the same layers in order.
  virtual void pull_rows(const std::vector<MicroBatch>& /*microbatches*/) {}
  virtual Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const = 0;
  virtual std::vector<Buffer> buffers() { return {}; }
};

}  // namespace loom::nn
