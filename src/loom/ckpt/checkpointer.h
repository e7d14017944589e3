#pragma once
// NOTE [Checkpoints]
// Every tensor of a run's state (parameters, AdamW moments, sparse tables' rows and moments) is
// saved in its full coordinates: each rank lists the pieces it holds as boxes of the full tensor
// (a tp shard, a ZeRO shard's run of a parameter, an owner's row partitions), and a piece that
// several ranks hold (dp/sp replicas, parameters replicated over tp) is written once, by the
// holder with the fewest bytes assigned so far: the replicas share the writing. Each writing rank
// writes one tensor file (tensor_file.h) into the partial directory; the ranks then agree that
// every file was written and synced, and rank 0 writes the manifest and commits (NOTE [Atomic
// checkpoints]). A load asks, for each piece a rank holds in the new layout, which stored boxes
// intersect it; it reads only those, verifies their checksums and that they cover the piece, and
// the ranks agree that every rank's reads are good before any value is assigned. So dp, tp, pp, sp,
// ZeRO, the sparse path and the number of ranks may all differ between save and load.
//
// Under checkpoint.async a background thread copies the pieces a rank writes (host memory of the
// size of its share) and writes them while training goes on: the copy runs beside the next step's
// forward and backward, which only read the state, and the step's update waits for it
// (before_update); the main thread asks at each step end whether every rank has finished (one
// small all-reduce while a save is pending) and commits then. No MPI call ever leaves the main
// thread.
#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "loom/ckpt/box.h"
#include "loom/ckpt/manifest.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/dist/communicator.h"

namespace loom::ckpt {

// A piece of a tensor of the run's state that this rank holds: `data` (shaped as box.size) is a
// view of the live state: a save reads it, a load writes it.
struct TensorPiece {
  std::string name;
  std::vector<int64_t> full_shape;
  Box box;
  at::Tensor data;
};

// `data` as the whole tensor `name` (a layer's buffer, a serial model's parameter).
inline TensorPiece whole_piece(std::string name, const at::Tensor& data) {
  const std::vector<int64_t> shape = data.sizes().vec();
  return {.name = std::move(name), .full_shape = shape, .box = whole(shape), .data = data};
}

struct SaveOptions {
  std::string dir;   // checkpoint.dir
  int64_t keep = 2;  // complete checkpoints kept
  bool async = false;
  // Test hook (NOTE [Fault injection]): runs on a rank after its file is written and synced, before
  // the ranks agree; a hook that never returns leaves the save half done.
  std::function<void(int64_t step)> after_file;
};

// What a checkpoint says besides its tensors.
struct CheckpointMeta {
  int64_t step = 0;
  std::string config;  // TOML
  nlohmann::json layout, state;
};

class Checkpointer {
 public:
  Checkpointer(SaveOptions options, dist::Communicator& world);
  ~Checkpointer();  // waits for a background write; an uncommitted save stays a partial directory

  // Collective. Writes (or, async, starts copying and writing) `pieces` and the meta as the
  // checkpoint of meta.step. A pending save is committed first. Returns the seconds the caller
  // was held.
  double save(const CheckpointMeta& meta, const std::vector<TensorPiece>& pieces);
  // Before anything changes the state (the optimizer's update): waits until a pending async save
  // has copied what it writes. Not collective.
  void before_update();
  // Collective, at every step end: commits a pending async save once every rank has written it.
  void poll();
  // Collective: waits for a pending save and commits it.
  void finish();
  bool pending() const { return pending_ != nullptr; }
  // The directory of the last committed checkpoint, and how long its writing took (seconds, from
  // the start of the save to the commit) and its bytes on this rank.
  const std::string& last_committed() const { return last_; }
  double last_seconds() const { return last_seconds_; }
  int64_t last_bytes() const { return last_bytes_; }

 private:
  struct Pending;
  void commit();
  std::string write_file(Pending& p);
  void write_async(Pending& p);

  SaveOptions options_;
  dist::Communicator& world_;
  std::unique_ptr<Pending> pending_;
  std::string last_;
  double last_seconds_ = 0;
  int64_t last_bytes_ = 0;
};

// Collective over `world`: fills every rank's `pieces` from the checkpoint in `dir` (its manifest
// `manifest`). Each rank reads the stored boxes its pieces intersect, checks their checksums and
// that they cover each piece; only when every rank's reads are good is anything assigned
// (AgreedInputError naming the file otherwise: exit 2, nothing changed). Returns the bytes read.
int64_t load(const std::string& dir, const Manifest& manifest, const std::vector<TensorPiece>& pieces,
             dist::Communicator& world);

// A checkpoint's tensor files opened so far, by file name.
using TensorFiles = std::map<std::string, std::unique_ptr<TensorFileReader>>;
// Stored box `box` of tensor `tensor` of the checkpoint in `dir`, read (its file opened once in
// `files`) and checked against the manifest: shape, dtype and checksum; InputError naming the
// file otherwise.
at::Tensor read_box(const std::string& dir, const StoredTensor& tensor, const StoredBox& box, TensorFiles& files);

// Checks that every file the manifest lists exists with its recorded size (a missing or
// truncated file is InputError naming it): the cheap checks, before anything is allocated.
void check_files(const std::string& dir, const Manifest& manifest);

}  // namespace loom::ckpt
