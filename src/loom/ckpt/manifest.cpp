#include "loom/ckpt/manifest.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/json_integer.h"

namespace loom::ckpt {
namespace {

constexpr const char* kFormat = "loom-checkpoint";

nlohmann::json box_json(const StoredBox& b) {
  return {{"offset", b.box.offset}, {"size", b.box.size}, {"file", b.file}, {"key", b.key}, {"checksum", b.checksum}};
}

void check_tensor(const StoredTensor& t, const std::string& path) {
  for (int64_t s : t.shape) LOOM_CHECK_INPUT(s >= 0, "{}: tensor {} has a negative extent", path, t.name);
  for (const StoredBox& b : t.boxes) {
    LOOM_CHECK_INPUT(b.box.offset.size() == t.shape.size() && b.box.size.size() == t.shape.size(),
                     "{}: a box of tensor {} has {} dimensions, the tensor {}", path, t.name, b.box.size.size(),
                     t.shape.size());
    for (size_t d = 0; d < t.shape.size(); ++d)
      LOOM_CHECK_INPUT(b.box.offset[d] >= 0 && b.box.size[d] >= 0 && b.box.offset[d] <= t.shape[d] - b.box.size[d],
                       "{}: box {} of tensor {} lies outside its shape", path, b.box.text(), t.name);
  }
}

}  // namespace

const StoredTensor* Manifest::find(const std::string& name) const {
  for (const StoredTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::optional<std::string> run_id_of(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("run")) return "";
  const nlohmann::json& run = state["run"];
  if (!run.is_object() || !run.contains("id") || !run["id"].is_string()) return std::nullopt;
  return run["id"].get<std::string>();
}

std::string manifest_text(const Manifest& m) {
  nlohmann::json tensors = nlohmann::json::array(), files = nlohmann::json::array();
  for (const StoredTensor& t : m.tensors) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const StoredBox& b : t.boxes) boxes.push_back(box_json(b));
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}, {"boxes", boxes}});
  }
  for (const StoredFile& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}});
  const nlohmann::json j = {{"format", kFormat}, {"version", m.version}, {"loom_version", m.loom_version},
                            {"step", m.step},    {"config", m.config},   {"layout", m.layout},
                            {"state", m.state},  {"files", files},       {"tensors", tensors}};
  return j.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& path) {
  Manifest m;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    LOOM_CHECK_INPUT(j.is_object() && j.value("format", "") == kFormat,
                     "{} is not a loom checkpoint manifest (no \"format\": \"{}\")", path, kFormat);
    m.version = json_integer<int>(j.at("version"));  // NOTE [Integers in JSON]
    LOOM_CHECK_INPUT(m.version == kFormatVersion,
                     "{}: checkpoint format version {} is not one this loom reads (version {}); hint: use the loom "
                     "that wrote it", path, m.version, kFormatVersion);
    m.loom_version = j.at("loom_version").get<std::string>();
    m.step = json_integer(j.at("step"));
    LOOM_CHECK_INPUT(m.step >= 0, "{}: step {} is negative", path, m.step);
    m.config = j.at("config").get<std::string>();
    m.layout = j.at("layout");
    m.state = j.at("state");
    for (const auto& f : j.at("files")) m.files.push_back({f.at("name").get<std::string>(), json_integer(f.at("bytes"))});
    for (const auto& t : j.at("tensors")) {
      StoredTensor st{.name = t.at("name").get<std::string>(), .shape = json_integers(t.at("shape")),
                      .dtype = t.at("dtype").get<std::string>()};
      for (const auto& b : t.at("boxes"))
        st.boxes.push_back({.box = {json_integers(b.at("offset")), json_integers(b.at("size"))},
                            .file = b.at("file").get<std::string>(), .key = b.at("key").get<std::string>(),
                            .checksum = b.at("checksum").get<std::string>()});
      check_tensor(st, path);
      m.tensors.push_back(std::move(st));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{} is not a valid checkpoint manifest: {}", path, e.what()));
  }
  for (const StoredTensor& t : m.tensors)
    for (const StoredBox& b : t.boxes) {
      bool listed = false;
      for (const StoredFile& f : m.files) listed = listed || f.name == b.file;
      LOOM_CHECK_INPUT(listed && b.file.find('/') == std::string::npos && !b.file.empty() && b.file[0] != '.',
                       "{}: tensor {} names file \"{}\", which the manifest does not list", path, t.name, b.file);
    }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  LOOM_CHECK_INPUT(fs::exists(dir, ec), "checkpoint {} does not exist", dir);
  LOOM_CHECK_INPUT(fs::is_directory(dir, ec), "{} is not a checkpoint: it is a file, not a directory", dir);
  const std::string path = (fs::path(dir) / "manifest.json").string();
  std::ifstream in(path);
  LOOM_CHECK_INPUT(in.good(), "{} is not a complete checkpoint: it has no manifest.json; hint: give a step "
                   "directory such as {}/step-0000100, or the checkpoint.dir with --resume auto", dir, dir);
  std::stringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), path);
}

}  // namespace loom::ckpt
