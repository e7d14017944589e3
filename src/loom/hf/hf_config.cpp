#include "loom/hf/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <vector>

#include "loom/core/error.h"
#include "loom/nn/swiglu.h"

namespace loom::hf {
namespace {

constexpr double kLoomNormEps = 1e-5;  // nn::layer_norm and nn::rms_norm

// One config.json, read key by key: each error names the file and the key.
class Keys {
 public:
  Keys(const nlohmann::json& json, const std::string& path) : json_(json), path_(path) {
    LOOM_CHECK_INPUT(json.is_object(), "{}: not a JSON object; hint: a Hugging Face model folder's config.json", path);
  }
  bool has(const char* key) const { return json_.contains(key) && !json_.at(key).is_null(); }
  int64_t count(const char* key) const {
    LOOM_CHECK_INPUT(has(key), "{}: the key \"{}\" is missing; hint: every {} config.json names it", path_, key,
                     arch_);
    return positive(key, json_.at(key));
  }
  int64_t count_or(const char* key, int64_t fallback) const { return has(key) ? count(key) : fallback; }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    LOOM_CHECK_INPUT(json_.at(key).is_number(), "{}: \"{}\" is {}, not a number", path_, key, json_.at(key).dump());
    return json_.at(key).get<double>();
  }
  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    LOOM_CHECK_INPUT(json_.at(key).is_boolean(), "{}: \"{}\" is {}, not true or false", path_, key, json_.at(key).dump());
    return json_.at(key).get<bool>();
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    LOOM_CHECK_INPUT(json_.at(key).is_string(), "{}: \"{}\" is {}, not a string", path_, key, json_.at(key).dump());
    return json_.at(key).get<std::string>();
  }
  // `key` must be absent, null or `expected`: what loom computes.
  template <class T>
  void require(const char* key, const T& expected, const char* why) const {
    if (!has(key)) return;
    LOOM_CHECK_INPUT(json_.at(key) == nlohmann::json(expected), "{}: \"{}\" is {}, and loom supports only {}: {}",
                     path_, key, json_.at(key).dump(), nlohmann::json(expected).dump(), why);
  }
  void set_arch(std::string_view arch) { arch_ = arch; }
  const nlohmann::json& json() const { return json_; }
  const std::string& path() const { return path_; }

 private:
  int64_t positive(const char* key, const nlohmann::json& v) const {
    LOOM_CHECK_INPUT(v.is_number_integer() && v.get<int64_t>() > 0, "{}: \"{}\" is {}, not a positive integer", path_,
                     key, v.dump());
    return v.get<int64_t>();
  }
  const nlohmann::json& json_;
  std::string path_;
  std::string_view arch_ = "Llama or GPT-2";
};

// The architecture config.json names by "architectures" and "model_type"; both must agree.
Arch find_arch(const nlohmann::json& j, const Keys& keys) {
  std::vector<Arch> named;
  const std::string type = keys.text_or("model_type", "");
  if (type == "llama") named.push_back(Arch::Llama);
  if (type == "gpt2") named.push_back(Arch::Gpt2);
  LOOM_CHECK_INPUT(type.empty() || !named.empty(),
                   "{}: \"model_type\" is \"{}\", an architecture loom does not have; hint: loom imports \"llama\" "
                   "(LlamaForCausalLM) and \"gpt2\" (GPT2LMHeadModel)", keys.path(), type);
  if (keys.has("architectures")) {
    LOOM_CHECK_INPUT(j.at("architectures").is_array() && j.at("architectures").size() == 1 &&
                         j.at("architectures")[0].is_string(),
                     "{}: \"architectures\" is {}, not a list of one name", keys.path(), j.at("architectures").dump());
    const std::string name = j.at("architectures")[0];
    std::optional<Arch> arch;
    if (name == "LlamaForCausalLM") arch = Arch::Llama;
    if (name == "GPT2LMHeadModel" || name == "GPT2Model") arch = Arch::Gpt2;
    LOOM_CHECK_INPUT(arch, "{}: \"architectures\" names {}, an architecture loom does not have; hint: loom imports "
                     "LlamaForCausalLM and GPT2LMHeadModel", keys.path(), name);
    LOOM_CHECK_INPUT(named.empty() || named[0] == *arch, "{}: \"architectures\" ({}) contradicts \"model_type\" ({})",
                     keys.path(), name, type);
    return *arch;
  }
  LOOM_CHECK_INPUT(!named.empty(), "{}: neither \"architectures\" nor \"model_type\" names the architecture; hint: a "
                   "Hugging Face config.json has both", keys.path());
  return named[0];
}

void check_eps(const Keys& keys, const char* key, double fallback) {
  const double eps = keys.number_or(key, fallback);
  LOOM_CHECK_INPUT(eps == kLoomNormEps, "{}: \"{}\" is {}, and loom's norms use {} (a model trained with another "
                   "epsilon would compute other values)", keys.path(), key, eps, kLoomNormEps);
}

// ffn_mult and ffn_multiple_of whose SwiGLU width is `hidden`: Llama's own rounding (ffn_mult 4,
// a power of two multiple) where it gives that width, else the width as its own multiple.
std::pair<int64_t, int64_t> swiglu_keys(int64_t d_model, int64_t hidden, const Keys& keys) {
  constexpr int64_t kWidest = int64_t{1} << 40;  // far past any model, and 16 x it still fits an int64
  LOOM_CHECK_INPUT(d_model <= kWidest && hidden <= kWidest, "{}: \"hidden_size\" {} or \"intermediate_size\" {} is "
                   "over 2^40, wider than any model loom can hold", keys.path(), d_model, hidden);
  for (int64_t multiple = 1024; multiple >= 1; multiple /= 2)
    if (nn::swiglu_hidden(d_model, 4, multiple) == hidden) return {4, multiple};
  for (int64_t mult = 1; mult <= 8; ++mult)
    if (nn::swiglu_hidden(d_model, mult, hidden) == hidden) return {mult, hidden};
  LOOM_CHECK_INPUT(false, "{}: \"intermediate_size\" {} is below 2/3 of \"hidden_size\" {}, which loom's SwiGLU width "
                   "(ffn_multiple_of x ceil(2/3 x ffn_mult x d_model / ffn_multiple_of)) cannot express",
                   keys.path(), hidden, d_model);
  return {};
}

// Newer config.json files keep the rotary settings in "rope_parameters": its theta, and no scaling.
double rope_parameters(const Keys& keys, double theta) {
  const nlohmann::json& p = keys.json().at("rope_parameters");
  LOOM_CHECK_INPUT(p.is_object(), "{}: \"rope_parameters\" is {}, not an object", keys.path(), p.dump());
  const std::string type = p.value("rope_type", p.value("type", std::string("default")));
  LOOM_CHECK_INPUT(type == "default", "{}: \"rope_parameters\" has rope_type \"{}\", and loom supports only "
                   "rotary positions without scaling (\"default\")", keys.path(), type);
  const nlohmann::json t = p.value("rope_theta", nlohmann::json(theta));
  LOOM_CHECK_INPUT(t.is_number(), "{}: rope_parameters.rope_theta is {}, not a number", keys.path(), t.dump());
  return t.get<double>();
}

ModelConfig llama_model(Keys& keys) {
  keys.set_arch("Llama");
  ModelConfig m;
  m.kind = "llama";
  m.vocab = keys.count("vocab_size");
  m.d_model = keys.count("hidden_size");
  m.n_layers = keys.count("num_hidden_layers");
  m.n_heads = keys.count("num_attention_heads");
  m.n_kv_heads = keys.count_or("num_key_value_heads", m.n_heads);
  LOOM_CHECK_INPUT(m.d_model % m.n_heads == 0, "{}: \"hidden_size\" {} is not a multiple of \"num_attention_heads\" {}",
                   keys.path(), m.d_model, m.n_heads);
  LOOM_CHECK_INPUT(m.n_heads % m.n_kv_heads == 0, "{}: \"num_attention_heads\" {} is not a multiple of "
                   "\"num_key_value_heads\" {}", keys.path(), m.n_heads, m.n_kv_heads);
  const int64_t head_dim = keys.count_or("head_dim", m.d_model / m.n_heads);
  LOOM_CHECK_INPUT(head_dim == m.d_model / m.n_heads, "{}: \"head_dim\" {} contradicts \"hidden_size\" / "
                   "\"num_attention_heads\" = {}", keys.path(), head_dim, m.d_model / m.n_heads);
  std::tie(m.ffn_mult, m.ffn_multiple_of) = swiglu_keys(m.d_model, keys.count("intermediate_size"), keys);
  m.seq_len = keys.count_or("max_position_embeddings", 2048);
  m.rope_theta = keys.number_or("rope_theta", 10000.0);
  if (keys.has("rope_parameters")) m.rope_theta = rope_parameters(keys, m.rope_theta);
  m.tie_embeddings = keys.flag_or("tie_word_embeddings", false);
  check_eps(keys, "rms_norm_eps", 1e-6);
  keys.require("rope_scaling", nullptr, "rotary positions without scaling");
  keys.require("hidden_act", "silu", "SwiGLU's gate is silu");
  keys.require("attention_bias", false, "Llama's projections have no biases in loom");
  keys.require("mlp_bias", false, "Llama's projections have no biases in loom");
  return m;
}

ModelConfig gpt2_model(Keys& keys) {
  keys.set_arch("GPT-2");
  ModelConfig m;
  m.kind = "gpt";
  m.vocab = keys.count("vocab_size");
  m.d_model = keys.count("n_embd");
  m.n_layers = keys.count("n_layer");
  m.n_heads = keys.count("n_head");
  m.max_positions = keys.count("n_positions");
  m.seq_len = m.max_positions;
  LOOM_CHECK_INPUT(m.d_model % m.n_heads == 0, "{}: \"n_embd\" {} is not a multiple of \"n_head\" {}", keys.path(),
                   m.d_model, m.n_heads);
  const int64_t inner = keys.count_or("n_inner", 4 * m.d_model);
  LOOM_CHECK_INPUT(inner % m.d_model == 0, "{}: \"n_inner\" {} is not a multiple of \"n_embd\" {} (loom's MLP width "
                   "is model.ffn_mult x d_model)", keys.path(), inner, m.d_model);
  m.ffn_mult = inner / m.d_model;
  m.tie_embeddings = keys.flag_or("tie_word_embeddings", true);
  check_eps(keys, "layer_norm_epsilon", 1e-5);
  const std::string act = keys.text_or("activation_function", "gelu_new");
  LOOM_CHECK_INPUT(act == "gelu_new" || act == "gelu_pytorch_tanh", "{}: \"activation_function\" is \"{}\", and loom's "
                   "GPT computes the tanh GELU (\"gelu_new\")", keys.path(), act);
  keys.require("scale_attn_weights", true, "attention scores scaled by 1/sqrt(head dim)");
  keys.require("scale_attn_by_inverse_layer_idx", false, "attention scores scaled by 1/sqrt(head dim)");
  return m;
}

}  // namespace

std::string_view arch_name(Arch arch) { return arch == Arch::Llama ? "llama" : "gpt2"; }

HfModel read_hf_config(const nlohmann::json& config, const std::string& path) {
  try {
    Keys keys(config, path);
    HfModel out;
    out.arch = find_arch(config, keys);
    out.model = out.arch == Arch::Llama ? llama_model(keys) : gpt2_model(keys);
    out.torch_dtype = keys.text_or("torch_dtype", "");
    return out;
  } catch (const nlohmann::json::exception& e) {  // a nested field of another type than expected
    LOOM_CHECK_INPUT(false, "{}: {}", path, e.what());
  }
  return {};
}

Arch arch_of(const ModelConfig& m) {
  LOOM_CHECK_INPUT(m.kind == "llama" || m.kind == "gpt", "model.kind = \"{}\" has no Hugging Face architecture loom "
                   "writes; hint: \"llama\" exports as LlamaForCausalLM, \"gpt\" as GPT2LMHeadModel", m.kind);
  LOOM_CHECK_INPUT(m.moe_experts == 0, "model.moe_experts = {}: loom exports dense Llama and GPT-2 models only",
                   m.moe_experts);
  return m.kind == "llama" ? Arch::Llama : Arch::Gpt2;
}

nlohmann::json write_hf_config(const ModelConfig& m, const std::string& torch_dtype, int64_t context) {
  if (arch_of(m) == Arch::Llama) {
    const int64_t kv = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
    return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", m.vocab},
            {"hidden_size", m.d_model}, {"num_hidden_layers", m.n_layers}, {"num_attention_heads", m.n_heads},
            {"num_key_value_heads", kv}, {"head_dim", m.d_model / m.n_heads},
            {"intermediate_size", nn::swiglu_hidden(m.d_model, m.ffn_mult, m.ffn_multiple_of)},
            {"max_position_embeddings", context}, {"rope_theta", m.rope_theta}, {"rope_scaling", nullptr},
            {"rms_norm_eps", kLoomNormEps}, {"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false},
            {"tie_word_embeddings", m.tie_embeddings}, {"torch_dtype", torch_dtype}};
  }
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", m.vocab},
          {"n_embd", m.d_model}, {"n_layer", m.n_layers}, {"n_head", m.n_heads},
          {"n_positions", m.max_positions > 0 ? m.max_positions : m.seq_len}, {"n_inner", m.ffn_mult * m.d_model},
          {"layer_norm_epsilon", kLoomNormEps}, {"activation_function", "gelu_new"}, {"scale_attn_weights", true},
          {"tie_word_embeddings", m.tie_embeddings}, {"torch_dtype", torch_dtype}};
}

}  // namespace loom::hf
