// A Hugging Face model folder's config.json (hf/hf_config.h, NOTE [Hugging Face layout]), read as
// `loom ckpt import --from hf` reads it: HfFolder opens the folder and parses config.json, then
// read_hf_config maps it onto loom's model. The folder's weights are one fixed model.safetensors,
// written once: HfFolder refuses a folder without weights, and they are not what this target reads
// (fuzz_hf_index and fuzz_tensor_file read those). Input: config.json's text.
// Contract (NOTE [Reader contract]) plus the value's invariants (positive sizes, heads that divide
// the width, the SwiGLU width config.json names), and a config that reads writes back
// (write_hf_config, as `loom ckpt export --to hf` writes it, through its text) as one that reads equal.
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/hf/hf_config.h"
#include "loom/hf/hf_folder.h"
#include "loom/nn/swiglu.h"

namespace {

// The model folder, with its weights: made on the first input, kept for the process.
const std::string& folder() {
  static const std::string dir = [] {
    const std::filesystem::path d = loom::fuzz::Scratch::dir() / "hf";
    std::filesystem::create_directories(d);
    loom::ckpt::write_tensor_file((d / "model.safetensors").string(),
                                  {{"lm_head.weight", at::zeros({2, 2}, at::kFloat)}});
    return d.string();
  }();
  return dir;
}

void check_value(const loom::hf::HfModel& h, const nlohmann::json& config) {
  const loom::ModelConfig& m = h.model;
  const bool llama = h.arch == loom::hf::Arch::Llama;
  loom::fuzz::require(m.kind == (llama ? "llama" : "gpt"), "the model kind is not the architecture's");
  loom::fuzz::require(m.vocab > 0 && m.d_model > 0 && m.n_layers > 0 && m.n_heads > 0 && m.seq_len > 0,
                      "a size is not positive");
  loom::fuzz::require(m.d_model % m.n_heads == 0, "the width is not a multiple of the heads");
  if (llama) {
    loom::fuzz::require(m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads == 0, "the kv heads do not divide the heads");
    // intermediate_size is a key every Llama config.json must name, so it is there when this returned.
    loom::fuzz::require(m.ffn_mult > 0 && m.ffn_multiple_of > 0 &&
                            loom::nn::swiglu_hidden(m.d_model, m.ffn_mult, m.ffn_multiple_of) ==
                                config.at("intermediate_size").get<int64_t>(),
                        "the SwiGLU width is not config.json's intermediate_size");
  } else {
    loom::fuzz::require(m.ffn_mult > 0 && m.max_positions == m.seq_len, "the MLP width or the positions out of range");
  }
}

void check(std::string_view input) {
  const std::string& dir = folder();
  loom::fuzz::Scratch::write("hf/config.json", input);
  const loom::hf::HfFolder f(dir);
  const loom::hf::HfModel h = loom::hf::read_hf_config(f.config(), f.config_path());
  check_value(h, f.config());
  // Through the text export writes (dump(2)): the numbers must survive it too. A double JSON holds
  // is finite (the parser refuses what overflows), and its shortest text reads back the same.
  loom::hf::HfModel again;
  try {
    const nlohmann::json written = loom::hf::write_hf_config(h.model, h.torch_dtype, h.model.seq_len);
    again = loom::hf::read_hf_config(nlohmann::json::parse(written.dump(2)), "write_hf_config");
  } catch (const loom::InputError& e) {
    loom::fuzz::fail(std::string("write_hf_config wrote a config.json that does not read back: ") + e.what());
  }
  loom::fuzz::require(again.arch == h.arch && again.model == h.model && again.torch_dtype == h.torch_dtype,
                      "write_hf_config's config.json reads back different");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
