#pragma once
// NOTE [Decoding]: text generation runs a serial model's chain one new token at a time. Training's
// forward sees whole sequences; a decoding layer instead takes the tokens at positions
// [position, position + T) of each sequence, given every earlier token was fed to it before
// through the same DecodeCache. The prompt goes in one call (T = its length: the prefill), then
// each sampled token alone (T = 1). A layer that mixes positions (attention) keeps what later
// tokens need of earlier ones in the cache (their keys and values), so a new token costs one pass
// over the cache instead of recomputing the sequence; the others keep nothing. Each decoding call
// runs the layer's own forward math (the same kernels and parameters), so the logits of every
// position equal the full causal forward's up to floating-point reassociation.
//
// A layer decodes when it also implements Decodable (found by dynamic_cast, so nn::Layer stays as
// it is); a chain with a layer that does not (a DLRM) cannot generate text.
#include <ATen/ATen.h>

#include <memory>

#include "loom/core/error.h"

namespace loom::nn {

// What one layer keeps between decoding calls for one batch of sequences.
struct DecodeState {
  virtual ~DecodeState() = default;
};

// One layer's cache: its state (made on first use) and the most positions a sequence may reach.
class DecodeCache {
 public:
  explicit DecodeCache(int64_t capacity) : capacity_(capacity) {}
  int64_t capacity() const { return capacity_; }
  template <class State>
  State& state() {
    if (state_ == nullptr) state_ = std::make_unique<State>();
    return static_cast<State&>(*state_);
  }

 private:
  int64_t capacity_;
  std::unique_ptr<DecodeState> state_;
};

// The keys and values of one attention layer for every position fed so far, [B, Hkv, capacity,
// hd] each, written in place: appending is one copy of the new tokens' rows, never of the cache.
struct KeyValueCache : DecodeState {
  at::Tensor k, v;

  // Stores k and v ([B, Hkv, T, hd]) of positions [position, position + T) and returns the keys
  // and values of positions [0, position + T) (views of the cache).
  std::pair<at::Tensor, at::Tensor> append(const at::Tensor& keys, const at::Tensor& values, int64_t position,
                                           int64_t capacity) {
    const int64_t end = position + keys.size(2);
    LOOM_CHECK(end <= capacity, "[decode] positions up to {} exceed the cache's {}", end, capacity);
    if (!k.defined()) {
      std::vector<int64_t> shape = keys.sizes().vec();
      shape[2] = capacity;
      k = at::empty(shape, keys.options()), v = at::empty(shape, values.options());
    }
    k.narrow(2, position, keys.size(2)).copy_(keys);
    v.narrow(2, position, values.size(2)).copy_(values);
    return {k.narrow(2, 0, end), v.narrow(2, 0, end)};
  }
};

class Decodable {
 public:
  virtual ~Decodable() = default;
  // x: token ids [B, T] (int64) for the chain's first layer, else the previous layer's output
  // [B, T, ...] for positions [position, position + T); calls on one cache come in order of
  // position, each starting where the last ended (a new cache starts at 0). Returns the layer's
  // output for those tokens; the chain's last layer returns logits [B, T, vocab] (float32 or
  // wider) instead of a loss. Serial layers only (a communicator of one rank).
  virtual at::Tensor decode(const at::Tensor& x, int64_t position, DecodeCache& cache) = 0;
};

}  // namespace loom::nn
