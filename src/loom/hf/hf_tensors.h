#pragma once
// How each of loom's parameters lies in a Hugging Face checkpoint (NOTE [Hugging Face layout]):
// its names there and the rearrangement between the two. Every rearrangement is a permutation of
// the values, so a tensor goes through loom and back bit for bit.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "loom/hf/hf_config.h"

namespace loom::hf {

enum class Layout : uint8_t {
  Same,         // one tensor, the same shape
  Transposed,   // GPT-2's Conv1D weight [in, out] for loom's [out, in]
  Stacked,      // loom stacks them along a new first dim: [k | v], [gate | up]
  FusedConv1D,  // GPT-2's c_attn [in, 3 out] for loom's qkv [3, out, in]
  FusedBias,    // GPT-2's c_attn bias [3 out] for loom's [3, out]
};

struct TensorMap {
  std::string loom;             // the parameter's name in loom
  std::vector<std::string> hf;  // its tensors' names in the Hugging Face layout
  Layout layout = Layout::Same;
};

// Every parameter of loom's `model` (of architecture `arch`) and where it lies; GPT-2's names
// carry the "transformer." prefix of GPT2LMHeadModel.
std::vector<TensorMap> tensor_maps(Arch arch, const ModelConfig& model);

// The shapes of the Hugging Face tensors of `map` for a loom parameter of `loom_shape`.
std::vector<std::vector<int64_t>> hf_shapes(const TensorMap& map, const std::vector<int64_t>& loom_shape);
// The loom parameter from its Hugging Face tensors (each of its hf_shapes), and back.
at::Tensor to_loom(const TensorMap& map, const std::vector<at::Tensor>& hf);
std::vector<at::Tensor> to_hf(const TensorMap& map, const at::Tensor& loom);

}  // namespace loom::hf
