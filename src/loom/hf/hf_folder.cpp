#include "loom/hf/hf_folder.h"

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/core/error.h"

namespace loom::hf {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  LOOM_CHECK_INPUT(in.good(), "{}: cannot be read; hint: a Hugging Face model folder holds config.json and its "
                   "weights", path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    LOOM_CHECK_INPUT(false, "{}: not JSON ({})", path.string(), e.what());
  }
  return {};
}

}  // namespace

HfFolder::HfFolder(std::string dir) : dir_(std::move(dir)) {
  LOOM_CHECK_INPUT(fs::is_directory(dir_), "{} is not a directory; hint: --from hf names a Hugging Face model folder "
                   "(config.json, model.safetensors)", dir_);
  config_ = read_json(config_path());
  const fs::path index = fs::path(dir_) / kIndex;
  if (fs::exists(index)) {
    const nlohmann::json j = read_json(index);
    LOOM_CHECK_INPUT(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(),
                     "{}: no \"weight_map\" object", index.string());
    std::map<std::string, std::string> named;
    for (const auto& [key, file] : j.at("weight_map").items()) {
      LOOM_CHECK_INPUT(file.is_string(), "{}: \"{}\" maps to {}, not a file name", index.string(), key, file.dump());
      const std::string name = file.get<std::string>();
      // A file of the folder itself, checked before anything is opened: no path, no NUL.
      LOOM_CHECK_INPUT(!name.empty() && name != "." && name != ".." && name.find_first_of(std::string("/\0", 2)) ==
                       std::string::npos, "{}: \"{}\" maps to {}, not the name of a file in the folder", index.string(),
                       key, file.dump());
      named[key] = name;
    }
    std::set<std::string> files;
    for (const auto& [key, file] : named) files.insert(file);
    for (const std::string& file : files) add_file(file);
    for (const auto& [key, file] : named) {
      auto it = where_.find(key);
      LOOM_CHECK_INPUT(it != where_.end() && fs::path(it->second->path()).filename() == file,
                       "{}: names tensor {} in {}, which does not hold it", index.string(), key, file);
    }
    return;
  }
  LOOM_CHECK_INPUT(fs::exists(fs::path(dir_) / kSingle), "{}: neither {} nor {} is there; hint: loom reads the "
                   "safetensors layout (a folder of .bin weights converts with the Hugging Face library)", dir_,
                   kSingle, kIndex);
  add_file(kSingle);
}

void HfFolder::add_file(const std::string& name) {
  const fs::path path = fs::path(dir_) / name;
  LOOM_CHECK_INPUT(fs::is_regular_file(path), "{}: the index names {}, which is missing", dir_, name);
  readers_.push_back(std::make_unique<ckpt::TensorFileReader>(path.string()));
  for (const auto& [key, entry] : readers_.back()->entries()) {
    const auto [it, fresh] = where_.emplace(key, readers_.back().get());
    LOOM_CHECK_INPUT(fresh, "{}: tensor {} is stored in both {} and {}", dir_, key, it->second->path(), path.string());
  }
}

std::string HfFolder::config_path() const { return (fs::path(dir_) / "config.json").string(); }

const ckpt::TensorFileReader::Entry& HfFolder::entry(const std::string& name) const {
  return where_.at(name)->entries().at(name);
}

const std::string& HfFolder::file_of(const std::string& name) const { return where_.at(name)->path(); }

at::Tensor HfFolder::read(const std::string& name) const { return where_.at(name)->read(name); }

std::vector<std::string> HfFolder::files() const {
  std::vector<std::string> out{config_path()};
  for (const auto& r : readers_) out.push_back(r->path());
  return out;
}

// `dir` as an absolute path without a trailing separator ("out/" and "out" are one folder).
fs::path folder_path(const std::string& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  return p.has_filename() ? p : p.parent_path();
}

void check_new_folder(const std::string& dir) {
  const fs::path target = folder_path(dir);
  std::error_code ec;
  LOOM_CHECK_INPUT(!fs::exists(target, ec) || (fs::is_directory(target, ec) && fs::is_empty(target, ec)),
                   "--out {} exists and is not an empty folder; hint: loom writes a new model folder and never over "
                   "files that are there", dir);
  const fs::path parent = target.parent_path();
  LOOM_CHECK_INPUT(fs::is_directory(parent, ec) && ::access(parent.c_str(), W_OK) == 0,
                   "--out {}: its parent folder {} does not exist or cannot be written", dir, parent.string());
}

void write_hf_folder(const std::string& dir, const nlohmann::json& config,
                     const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t shard_bytes,
                     const std::vector<std::pair<std::string, std::string>>& files) {
  check_new_folder(dir);
  // Shards: tensors in order, a new file once the current one would pass shard_bytes.
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t bytes = static_cast<int64_t>(tensors[i].second.nbytes());
    if (!shards.back().empty() && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(i), in_shard += bytes, total += bytes;
  }
  const fs::path target = folder_path(dir);
  const fs::path partial = target.parent_path() / fmt::format(".{}.loom-partial", target.filename().string());
  fs::remove_all(partial);
  fs::create_directories(partial);
  try {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name =
          shards.size() == 1 ? kSingle : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      std::vector<std::pair<std::string, at::Tensor>> entries;
      for (size_t i : shards[s]) entries.push_back(tensors[i]), weight_map[tensors[i].first] = name;
      ckpt::write_tensor_file((partial / name).string(), entries, {{"format", "pt"}});
    }
    if (shards.size() > 1)
      ckpt::write_synced((partial / kIndex).string(),
                         nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
    ckpt::write_synced((partial / "config.json").string(), config.dump(2) + "\n");
    for (const auto& [name, bytes] : files) ckpt::write_synced((partial / name).string(), bytes);
    if (fs::exists(target)) fs::remove(target);  // empty, checked above
    fs::rename(partial, target);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(partial, ec);
    throw;
  }
}

}  // namespace loom::hf
