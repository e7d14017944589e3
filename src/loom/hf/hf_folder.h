#pragma once
// A Hugging Face model folder on disk (NOTE [Hugging Face layout]): read config.json and the
// weights, one model.safetensors or the shards model.safetensors.index.json names; write them.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/ckpt/tensor_file.h"

namespace loom::hf {

class HfFolder {
 public:
  // Opens `dir`: config.json and every weight file's header. InputError naming the file for a
  // missing config.json or weights, an index naming a missing file or a tensor its file lacks,
  // and a tensor stored twice.
  explicit HfFolder(std::string dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  std::string config_path() const;
  // Every tensor's name, with the file that holds it.
  const std::map<std::string, const ckpt::TensorFileReader*>& tensors() const { return where_; }
  bool has(const std::string& name) const { return where_.contains(name); }
  const ckpt::TensorFileReader::Entry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  at::Tensor read(const std::string& name) const;
  std::vector<std::string> files() const;  // every file read: config.json and the weights

 private:
  void add_file(const std::string& name);
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<ckpt::TensorFileReader>> readers_;
  std::map<std::string, const ckpt::TensorFileReader*> where_;
};

// InputError unless `dir` ("out" or "out/") is a new or empty folder whose parent can be written.
void check_new_folder(const std::string& dir);

// Writes a model folder `dir` (check_new_folder): config.json and the tensors in
// their order, as model.safetensors, or, past `shard_bytes` in one file, as shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json. Written into a temporary
// folder beside `dir` and renamed into place, so a failure leaves nothing under `dir`.
// `files`: more files (name, bytes), such as the tokenizer.
void write_hf_folder(const std::string& dir, const nlohmann::json& config,
                     const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t shard_bytes,
                     const std::vector<std::pair<std::string, std::string>>& files = {});

}  // namespace loom::hf
