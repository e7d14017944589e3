#include "loom/hf/hf_tensors.h"

#include <fmt/format.h>

#include "loom/core/error.h"

namespace loom::hf {
namespace {

std::vector<TensorMap> llama_maps(const ModelConfig& m) {
  std::vector<TensorMap> maps{{"embedding.wte", {"model.embed_tokens.weight"}},
                              {"final_norm.weight", {"model.norm.weight"}}};
  if (!m.tie_embeddings) maps.push_back({"head.weight", {"lm_head.weight"}});
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string b = fmt::format("blocks.{}.", i), h = fmt::format("model.layers.{}.", i);
    maps.push_back({b + "attn.norm.weight", {h + "input_layernorm.weight"}});
    maps.push_back({b + "attn.q.weight", {h + "self_attn.q_proj.weight"}});
    maps.push_back({b + "attn.kv.weight", {h + "self_attn.k_proj.weight", h + "self_attn.v_proj.weight"}, Layout::Stacked});
    maps.push_back({b + "attn.proj.weight", {h + "self_attn.o_proj.weight"}});
    maps.push_back({b + "mlp.norm.weight", {h + "post_attention_layernorm.weight"}});
    maps.push_back({b + "mlp.gate_up.weight", {h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"}, Layout::Stacked});
    maps.push_back({b + "mlp.down.weight", {h + "mlp.down_proj.weight"}});
  }
  return maps;
}

std::vector<TensorMap> gpt2_maps(const ModelConfig& m) {
  std::vector<TensorMap> maps{{"embedding.wte", {"transformer.wte.weight"}},
                              {"embedding.wpe", {"transformer.wpe.weight"}},
                              {"final_norm.weight", {"transformer.ln_f.weight"}},
                              {"final_norm.bias", {"transformer.ln_f.bias"}}};
  if (!m.tie_embeddings) maps.push_back({"head.weight", {"lm_head.weight"}});
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string b = fmt::format("blocks.{}.", i), h = fmt::format("transformer.h.{}.", i);
    for (const char* p : {"weight", "bias"}) {
      maps.push_back({b + "attn.norm." + p, {h + "ln_1." + p}});
      maps.push_back({b + "mlp.norm." + p, {h + "ln_2." + p}});
    }
    maps.push_back({b + "attn.qkv.weight", {h + "attn.c_attn.weight"}, Layout::FusedConv1D});
    maps.push_back({b + "attn.qkv.bias", {h + "attn.c_attn.bias"}, Layout::FusedBias});
    maps.push_back({b + "attn.proj.weight", {h + "attn.c_proj.weight"}, Layout::Transposed});
    maps.push_back({b + "attn.proj.bias", {h + "attn.c_proj.bias"}});
    maps.push_back({b + "mlp.up.weight", {h + "mlp.c_fc.weight"}, Layout::Transposed});
    maps.push_back({b + "mlp.up.bias", {h + "mlp.c_fc.bias"}});
    maps.push_back({b + "mlp.down.weight", {h + "mlp.c_proj.weight"}, Layout::Transposed});
    maps.push_back({b + "mlp.down.bias", {h + "mlp.c_proj.bias"}});
  }
  return maps;
}

}  // namespace

std::vector<TensorMap> tensor_maps(Arch arch, const ModelConfig& model) {
  return arch == Arch::Llama ? llama_maps(model) : gpt2_maps(model);
}

std::vector<std::vector<int64_t>> hf_shapes(const TensorMap& map, const std::vector<int64_t>& s) {
  switch (map.layout) {
    case Layout::Same:
      return {s};
    case Layout::Transposed:
      LOOM_CHECK(s.size() == 2, "{}: a transposed tensor must have 2 dims", map.loom);
      return {{s[1], s[0]}};
    case Layout::Stacked:
      LOOM_CHECK(!s.empty() && s[0] == static_cast<int64_t>(map.hf.size()), "{}: stacks {} tensors", map.loom,
                 map.hf.size());
      return std::vector<std::vector<int64_t>>(map.hf.size(), std::vector<int64_t>(s.begin() + 1, s.end()));
    case Layout::FusedConv1D:
      LOOM_CHECK(s.size() == 3, "{}: a fused projection must have 3 dims", map.loom);
      return {{s[2], s[0] * s[1]}};
    case Layout::FusedBias:
      LOOM_CHECK(s.size() == 2, "{}: a fused bias must have 2 dims", map.loom);
      return {{s[0] * s[1]}};
  }
  return {};
}

at::Tensor to_loom(const TensorMap& map, const std::vector<at::Tensor>& hf) {
  switch (map.layout) {
    case Layout::Same:
      return hf[0];
    case Layout::Transposed:
      return hf[0].t().contiguous();
    case Layout::Stacked:
      return at::stack(hf);
    case Layout::FusedConv1D:  // [in, 3 out] -> [3 out, in] -> [3, out, in]
      return hf[0].t().reshape({3, -1, hf[0].size(0)}).contiguous();
    case Layout::FusedBias:
      return hf[0].reshape({3, -1});
  }
  return {};
}

std::vector<at::Tensor> to_hf(const TensorMap& map, const at::Tensor& loom) {
  switch (map.layout) {
    case Layout::Same:
      return {loom};
    case Layout::Transposed:
      return {loom.t().contiguous()};
    case Layout::Stacked: {
      std::vector<at::Tensor> parts;
      for (const at::Tensor& t : loom.unbind(0)) parts.push_back(t.contiguous());
      return parts;
    }
    case Layout::FusedConv1D:  // [3, out, in] -> [3 out, in] -> [in, 3 out]
      return {loom.reshape({-1, loom.size(2)}).t().contiguous()};
    case Layout::FusedBias:
      return {loom.reshape({-1}).contiguous()};
  }
  return {};
}

}  // namespace loom::hf
