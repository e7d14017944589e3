#include "loom/ckpt/inspect.h"

#include <fmt/ranges.h>
#include <filesystem>
#include <map>
#include <memory>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/checkpointer.h"
#include "loom/core/config.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"

namespace loom::ckpt {
namespace fs = std::filesystem;
namespace {

bool is_moment(const std::string& name) { return name.find(':') != std::string::npos; }

}  // namespace

at::Tensor assemble(const std::string& dir, const StoredTensor& t, TensorFiles& files, int64_t* bytes) {
  at::Tensor full = at::empty(t.shape, at::TensorOptions().dtype(dtype_of(t.dtype, dir + "/manifest.json")));
  at::Tensor covered = at::zeros(t.shape, at::TensorOptions().dtype(at::kBool));
  for (const StoredBox& b : t.boxes) {
    const at::Tensor data = read_box(dir, t, b, files);
    view_of(full, whole(t.shape), b.box).copy_(data);
    view_of(covered, whole(t.shape), b.box).fill_(true);
    *bytes += static_cast<int64_t>(data.nbytes());
  }
  LOOM_CHECK_INPUT(covered.all().item<bool>(), "checkpoint {} does not hold all of tensor {}; hint: a rank's file is "
                   "missing from it", dir, t.name);
  return full;
}

CheckpointSummary verify(const std::string& dir) {
  CheckpointSummary s{.dir = dir, .manifest = read_manifest(dir)};
  check_files(dir, s.manifest);
  TensorFiles readers;
  for (const StoredTensor& t : s.manifest.tensors) {
    int64_t bytes = 0;
    assemble(dir, t, readers, &bytes);
    s.tensors.push_back({.name = t.name, .dtype = t.dtype, .shape = t.shape, .boxes = t.boxes.size(), .bytes = bytes});
    s.bytes += bytes;
  }
  return s;
}

std::string describe(const CheckpointSummary& s, bool all_tensors) {
  const Manifest& m = s.manifest;
  std::string out = fmt::format("checkpoint {}: step {}, format version {}, written by loom {}\n", s.dir, m.step,
                                m.version, m.loom_version);
  out += fmt::format("layout: {}\n", m.layout.dump());
  if (m.state.contains("lr_schedule")) out += fmt::format("lr schedule: {}\n", m.state.at("lr_schedule").dump());
  if (m.state.contains("sparse")) out += fmt::format("sparse path: {}\n", m.state.at("sparse").dump());
  int64_t file_bytes = 0;
  for (const StoredFile& f : m.files) file_bytes += f.bytes;
  out += fmt::format("files: {} ({:.2f} MB)\n", m.files.size(), static_cast<double>(file_bytes) / 1e6);
  int64_t weights = 0, moments = 0, weight_count = 0;
  for (const TensorSummary& t : s.tensors) {
    (is_moment(t.name) ? moments : weights) += t.bytes;
    weight_count += is_moment(t.name) ? 0 : 1;
    if (all_tensors)
      out += fmt::format("  {} {} [{}] in {} box{}\n", t.name, t.dtype, fmt::join(t.shape, ", "), t.boxes,
                         t.boxes == 1 ? "" : "es");
  }
  out += fmt::format("tensors: {} weights ({:.2f} MB), {} optimizer moments ({:.2f} MB); checksums ok\n", weight_count,
                     static_cast<double>(weights) / 1e6, s.tensors.size() - static_cast<size_t>(weight_count),
                     static_cast<double>(moments) / 1e6);
  return out;
}

namespace {

// The [model] section of a checkpoint's config: what the exported weights are (the rest, paths and
// layout, says nothing about them and would make two exports of the same weights differ).
std::string model_toml(const std::string& config, const std::string& dir) {
  return to_toml(parse_config(config, dir + "/manifest.json"),
                 [](const std::string& key) { return key.starts_with("model."); });
}

}  // namespace

int64_t export_weights(const std::string& dir, const std::string& out, at::ScalarType type) {
  const Manifest m = read_manifest(dir);
  check_files(dir, m);
  std::vector<PathUse> inputs{{(fs::path(dir) / "manifest.json").string(), "the checkpoint's manifest"}};
  for (const StoredFile& f : m.files) inputs.push_back({(fs::path(dir) / f.name).string(), "a checkpoint file"});
  check_output_paths(inputs, {{out, "--out"}});
  check_outside_checkpoints({{out, "--out"}}, dir);  // NOTE [A checkpoint folder belongs to one run]
  TensorFiles readers;
  std::vector<std::pair<std::string, at::Tensor>> entries;
  for (const StoredTensor& t : m.tensors) {
    if (is_moment(t.name)) continue;
    int64_t bytes = 0;
    entries.emplace_back(t.name, assemble(dir, t, readers, &bytes).to(type).contiguous());
  }
  write_tensor_file_replacing(out, entries, {{"format", "pt"}, {"source", "loom checkpoint"},
                                             {"step", std::to_string(m.step)}, {"config", model_toml(m.config, dir)}});
  return static_cast<int64_t>(entries.size());
}

}  // namespace loom::ckpt
