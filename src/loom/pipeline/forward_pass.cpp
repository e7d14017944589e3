// PipelineExecutor::run_forward, the validation pass through the pipeline ranks.
#include <algorithm>
#include <deque>
#include <utility>

#include "loom/pipeline/executor.h"
#include "loom/pipeline/layer_pass.h"

namespace loom::pipeline {

// NOTE [Forward-only pass]: every rank takes the (micro-batch, virtual stage) pairs in the same
// order (micro-batch, then virtual stage), receiving each activation from the previous virtual
// stage and sending its own on, so no rank waits on a message that its sender has not yet reached:
// an F-only GPipe, with each micro-batch's forward moving down the pipeline while the first stage
// starts the next. At most one send per chunk is left in flight (the oldest is waited for), so the
// activations held for sending stay bounded whatever the micro-batch count; that wait cannot
// deadlock, since its receiver's pair comes earlier in the common order than the waiting rank's
// own. Messages carry the
// training tags of micro-batch 0: one (sender, receiver, tag) stream is delivered in order, and no
// training message is in flight between steps.
double PipelineExecutor::run_forward(int64_t microbatches, const std::function<nn::MicroBatch(int64_t)>& microbatch,
                                     nn::ParamResidency* params) {
  const int64_t last = schedule_.virtual_stages() - 1;
  std::vector<const StageChunk*> order;
  for (const StageChunk& chunk : chunks_) order.push_back(&chunk);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->virtual_stage < b->virtual_stage; });
  std::deque<dist::WorkPtr> sends;
  at::Tensor handed;  // the V's turn: chunk 0's output, chunk 1's input on the same rank
  double loss = 0;
  for (int64_t mb = 0; mb < microbatches; ++mb) {
    const nn::MicroBatch batch = microbatch(mb);
    for (const StageChunk* chunk : order) {
      const int64_t v = chunk->virtual_stage;
      at::Tensor x = batch.tokens;
      if (v > 0 && peer_of(v - 1) == pp_.rank()) {
        x = std::exchange(handed, at::Tensor());
      } else if (v > 0) {
        x = at::empty(boundary_shape_, at::TensorOptions().dtype(dtype_).device(device_));
        pp_.recv(x, peer_of(v - 1), tag_of(0, v - 1, false));
      }
      for (size_t l = 0; l < chunk->layers.size(); ++l) {
        nn::Layer* layer = chunk->layers[l];
        if (params) params->need(chunk->model_index[l], next_layer(*chunk, l, +1));
        nn::Saved saved;  // dropped at once: there is no backward
        named(layer->name(), "forward", [&] { x = layer->forward(x, batch, saved); });
      }
      if (params) params->action_done();
      if (v == last) {
        loss += x.item<double>();
        continue;
      }
      x = x.contiguous();
      check_boundary(x, "activation");
      if (peer_of(v + 1) == pp_.rank()) {
        handed = x;
        continue;
      }
      if (static_cast<int64_t>(sends.size()) >= schedule_.chunks) {
        sends.front()->wait();
        sends.pop_front();
      }
      sends.push_back(pp_.send_async(x, peer_of(v + 1), tag_of(0, v, false)));
    }
  }
  for (auto& work : sends) work->wait();
  return loss;
}

}  // namespace loom::pipeline
