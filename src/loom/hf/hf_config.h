#pragma once
// NOTE [Hugging Face layout]
// A Hugging Face model folder holds config.json (the architecture and its sizes), the weights as
// model.safetensors or as shards named by model.safetensors.index.json, and the tokenizer's files.
// loom reads and writes two of its architectures, the ones loom's model kinds compute exactly:
//   llama  LlamaForCausalLM: model.kind = "llama" (grouped kv heads, rotary "rotate half" pairs
//          (i, i + hd/2) as loom's own rotary, SwiGLU, RMSNorm, tied or untied head);
//   gpt2   GPT2LMHeadModel: model.kind = "gpt" (learned positions, LayerNorm, tanh GELU, biases,
//          one fused qkv projection, Conv1D weights stored [in, out]), its head tied to wte.
// What loom does not compute is refused by name before anything is read: another norm epsilon
// than loom's 1e-5, rope scaling, biases where loom has none, another activation.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "loom/core/config.h"

namespace loom::hf {

enum class Arch : uint8_t { Llama, Gpt2 };
std::string_view arch_name(Arch arch);  // "llama", "gpt2"

struct HfModel {
  Arch arch = Arch::Llama;
  ModelConfig model;        // loom's model of the same sizes
  std::string torch_dtype;  // what config.json says its weights are ("" when it says nothing)
};

// config.json (read from `path`, named in errors) as loom's model: InputError naming the key for
// a missing, mistyped or contradicting key, an unknown architecture, or what loom cannot compute.
HfModel read_hf_config(const nlohmann::json& config, const std::string& path);
// The config.json of loom's `model` (kind "llama" or "gpt") with weights of `torch_dtype` and, for
// a Llama, a context of `context` positions (max_position_embeddings); InputError for another kind
// or what the architecture cannot express (mixture of experts).
nlohmann::json write_hf_config(const ModelConfig& model, const std::string& torch_dtype, int64_t context);
// The architecture of loom's model kind; InputError for a kind with none.
Arch arch_of(const ModelConfig& model);

}  // namespace loom::hf
