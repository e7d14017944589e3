#pragma once
// NOTE [Sharded parameters]: under parallel.zero = 2 and 3 a layer's parameters and gradients are
// not all on a rank all the time (replicas/sharded_params.h). Whoever runs the layers (the
// pipeline executor) tells a ParamResidency where it is, and the residency makes the parameters
// whole and the gradient buffers present just before they are used, and reduces and frees them
// after:
//   need(l, next)                   before any pass of layer l that reads its values (forward,
//                                   recomputation, input gradient): they are whole on return, and
//                                   `next`'s (the layer this action passes next) may start to
//                                   gather while l computes;
//   before_weight_gradient(l)       before l's weight gradient: its gradient buffers exist, zeroed,
//                                   and its values may be gone (the weight gradient reads none);
//   prefetch(n)                     within a backward that takes each layer's weight gradient
//                                   after its input gradient, in place of need's `next`: after
//                                   before_weight_gradient(l), n's values may start to gather
//                                   while l's weight gradient computes, so a layer's values, its
//                                   gradient and the next layer's values are never all held;
//   after_weight_gradient(l)        after it, for each micro-batch: that micro-batch's gradient of
//                                   l is complete, and may be reduced into this rank's shard;
//   action_done()                   a compute action ended: nothing it gathered is needed now.
// A weight gradient reads the saved activations and the output gradient, never the values, so a W
// action gathers nothing. Layers are named by their index in the rank's model.
#include <cstddef>
#include <optional>

namespace loom::nn {

class ParamResidency {
 public:
  virtual ~ParamResidency() = default;
  virtual void need(size_t layer, std::optional<size_t> next) = 0;
  virtual void before_weight_gradient(size_t layer) = 0;
  virtual void prefetch(size_t layer) = 0;
  virtual void after_weight_gradient(size_t layer) = 0;
  virtual void action_done() = 0;
};

}  // namespace loom::nn
