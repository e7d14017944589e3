#pragma once
// A checkpoint's manifest.json: what the run was, where it stood, and where every piece of every
// tensor lies (docs/checkpoint.md describes the format; kFormatVersion is its version).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loom/ckpt/box.h"

namespace loom::ckpt {

inline constexpr int kFormatVersion = 1;

// One stored block of a tensor: which file holds it under which key, and its checksum.
struct StoredBox {
  Box box;
  std::string file;  // relative to the checkpoint directory
  std::string key;
  std::string checksum;  // checksum_text of its bytes
};

struct StoredTensor {
  std::string name;  // a parameter's name, or NAME:exp_avg / NAME:exp_avg_sq for its AdamW moments
  std::vector<int64_t> shape;  // full
  std::string dtype;           // "F32", ...
  std::vector<StoredBox> boxes;
};

struct StoredFile {
  std::string name;
  int64_t bytes = 0;
};

struct Manifest {
  int version = kFormatVersion;
  std::string loom_version;
  int64_t step = 0;           // optimizer steps done
  std::string config;         // the run's effective config, as TOML
  nlohmann::json layout;      // the layout it was written in (dp, tp, pp, sp, zero, ranks, ...)
  nlohmann::json state;       // data position, RNG, LR schedule, optimizer and sparse-path state
  std::vector<StoredFile> files;
  std::vector<StoredTensor> tensors;

  const StoredTensor* find(const std::string& name) const;
};

std::string manifest_text(const Manifest& manifest);
// The run a manifest's state names (NOTE [A checkpoint folder belongs to one run]): "" when it names
// none (a checkpoint older than run identities), none when its "run" is malformed.
std::optional<std::string> run_id_of(const nlohmann::json& state);
// Parses and checks a manifest (the format, its version, every box inside its tensor's shape);
// InputError naming `path` otherwise.
Manifest parse_manifest(const std::string& text, const std::string& path);
// Reads `dir`/manifest.json; InputError naming the directory when it is not a checkpoint.
Manifest read_manifest(const std::string& dir);

}  // namespace loom::ckpt
