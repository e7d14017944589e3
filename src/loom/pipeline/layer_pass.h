#pragma once
// What the executor's training step and its forward-only pass share about running one layer.
#include <fmt/format.h>

#include <optional>
#include <string>

#include "loom/core/error.h"
#include "loom/pipeline/executor.h"

namespace loom::pipeline {

// Runs one of a layer's passes; a tensor library error inside it (shapes that do not fit, most
// often in a layer of one's own) names the layer and the pass.
template <class Fn>
inline void named(const std::string& layer, const char* pass, Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw Error(fmt::format("layer \"{}\", {}: {}", layer, pass, what.substr(0, what.find('\n'))));
  }
}

// The model index of the layer a pass in direction `step` (+1 forward, -1 backward) reaches after
// layer `l` of the chunk, if any: the one whose parameters may be gathered ahead.
inline std::optional<size_t> next_layer(const StageChunk& chunk, size_t l, int step) {
  const int64_t at = static_cast<int64_t>(l) + step;
  if (at < 0 || at >= static_cast<int64_t>(chunk.layers.size())) return std::nullopt;
  return chunk.model_index[static_cast<size_t>(at)];
}

}  // namespace loom::pipeline
