// A sharded Hugging Face model folder's model.safetensors.index.json (hf/hf_folder.h, NOTE
// [Hugging Face layout]), read as `loom ckpt import --from hf` reads it: HfFolder opens every shard
// the index's weight_map names and finds each named tensor in its shard. Input: the index's text.
// The rest of the folder is fixed, written once: a config.json (its contents are fuzz_hf_config's)
// and three shards,
//   model-00001-of-00002.safetensors  model.embed_tokens.weight [4, 2] F32, model.norm.weight [2] F32
//   model-00002-of-00002.safetensors  lm_head.weight [4, 2] F32
//   extra.safetensors                 model.norm.weight again [2] I64 (named with the first
//                                     shard, a tensor stored twice)
// so an index can name what is there, what is missing, and what is in another file.
// Contract (NOTE [Reader contract]) plus: every tensor the weight_map names is found in the file it
// names; the files read are config.json and the weight_map's files, plain names in the folder; and
// each named tensor reads with its entry's dtype and shape.
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/hf/hf_folder.h"

namespace {

namespace fs = std::filesystem;

// The folder with its config.json and shards: made on the first input, kept for the process.
const std::string& folder() {
  static const std::string dir = [] {
    const fs::path d = loom::fuzz::Scratch::dir() / "hf";
    fs::create_directories(d);
    loom::fuzz::Scratch::write("hf/config.json", "{\"architectures\": [\"LlamaForCausalLM\"]}\n");
    loom::ckpt::write_tensor_file((d / "model-00001-of-00002.safetensors").string(),
                                  {{"model.embed_tokens.weight", at::zeros({4, 2}, at::kFloat)},
                                   {"model.norm.weight", at::ones({2}, at::kFloat)}});
    loom::ckpt::write_tensor_file((d / "model-00002-of-00002.safetensors").string(),
                                  {{"lm_head.weight", at::zeros({4, 2}, at::kFloat)}});
    loom::ckpt::write_tensor_file((d / "extra.safetensors").string(),
                                  {{"model.norm.weight", at::ones({2}, at::kLong)}});
    return d.string();
  }();
  return dir;
}

void check(std::string_view input) {
  const std::string& dir = folder();
  loom::fuzz::Scratch::write("hf/model.safetensors.index.json", input);
  const loom::hf::HfFolder f(dir);
  // HfFolder parsed these same bytes, so they parse, and weight_map is an object of strings.
  const nlohmann::json map = nlohmann::json::parse(std::string(input)).at("weight_map");
  std::set<std::string> listed;
  for (const auto& [key, file] : map.items()) {
    const std::string name = file.get<std::string>();
    listed.insert(name);
    loom::fuzz::require(f.has(key), "a tensor the index names is not found");
    loom::fuzz::require(f.file_of(key) == (fs::path(dir) / name).string(), "a tensor is found in another file");
    const loom::ckpt::TensorFileReader::Entry& e = f.entry(key);
    const at::Tensor t = f.read(key);
    loom::fuzz::require(t.scalar_type() == e.dtype && t.sizes().vec() == e.shape,
                        "a tensor reads with another dtype or shape");
  }
  const std::vector<std::string> files = f.files();
  loom::fuzz::require(!files.empty() && files[0] == f.config_path() && files.size() == listed.size() + 1,
                      "the files read are not config.json and the index's");
  for (size_t i = 1; i < files.size(); ++i) {
    const fs::path p(files[i]);
    loom::fuzz::require(p.parent_path() == fs::path(dir) && listed.contains(p.filename().string()),
                        "a file the index does not list, or one outside the folder, was read");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
