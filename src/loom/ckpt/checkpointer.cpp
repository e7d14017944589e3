#include "loom/ckpt/checkpointer.h"

#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/core/error.h"
#include "loom/dist/gather_text.h"
#include "loom/dist/input_agreement.h"
#include "loom/version.h"

namespace loom::ckpt {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// A box's key in its tensor file: NAME@OFFSETS.
std::string piece_key(const std::string& name, const Box& box) {
  return fmt::format("{}@{}", name, fmt::join(box.offset, ","));
}

// One piece of the state as every rank sees it when planning who writes what.
struct PieceInfo {
  std::string name, dtype;
  std::vector<int64_t> shape;
  Box box;
  int64_t bytes = 0;
  std::vector<int> holders;  // world ranks, ascending
  int writer = -1;
};

nlohmann::json describe(const std::vector<TensorPiece>& pieces) {
  nlohmann::json out = nlohmann::json::array();
  for (const TensorPiece& p : pieces)
    out.push_back({{"name", p.name}, {"shape", p.full_shape}, {"offset", p.box.offset}, {"size", p.box.size},
                   {"dtype", dtype_name(p.data.scalar_type())}, {"bytes", static_cast<int64_t>(p.data.nbytes())}});
  return out;
}

// Every distinct piece of every rank with its writer: the holder with the fewest bytes assigned
// so far, largest pieces first (the same on every rank: it depends only on the gathered lists).
std::vector<PieceInfo> plan_writers(const std::vector<std::string>& lists) {
  std::map<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>, PieceInfo> unique;
  for (size_t rank = 0; rank < lists.size(); ++rank)
    for (const auto& d : nlohmann::json::parse(lists[rank])) {
      PieceInfo info{.name = d.at("name"), .dtype = d.at("dtype"), .shape = d.at("shape"),
                     .box = {d.at("offset"), d.at("size")}, .bytes = d.at("bytes")};
      auto [it, fresh] = unique.try_emplace({info.name, info.box.offset, info.box.size}, std::move(info));
      it->second.holders.push_back(static_cast<int>(rank));
    }
  std::vector<PieceInfo> out;
  for (auto& [key, info] : unique) out.push_back(std::move(info));
  std::stable_sort(out.begin(), out.end(), [](const PieceInfo& a, const PieceInfo& b) { return a.bytes > b.bytes; });
  std::vector<int64_t> load(lists.size(), 0);
  for (PieceInfo& p : out) {
    p.writer = *std::min_element(p.holders.begin(), p.holders.end(), [&](int a, int b) {
      return std::tie(load[static_cast<size_t>(a)], a) < std::tie(load[static_cast<size_t>(b)], b);
    });
    load[static_cast<size_t>(p.writer)] += p.bytes;
  }
  return out;
}

std::string file_name(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

// The manifest of a save: the meta, each rank's file, each piece's box with its writer's checksum.
Manifest build_manifest(const CheckpointMeta& meta, const std::vector<PieceInfo>& plan,
                        const std::vector<std::string>& reports) {
  Manifest m{.loom_version = kVersion, .step = meta.step, .config = meta.config, .layout = meta.layout,
             .state = meta.state};
  std::map<std::string, std::string> sums;
  for (size_t r = 0; r < reports.size(); ++r) {
    const nlohmann::json rep = nlohmann::json::parse(reports[r]);
    if (rep.at("file_bytes").get<int64_t>() > 0) m.files.push_back({file_name(static_cast<int>(r)), rep.at("file_bytes")});
    for (const auto& e : rep.at("entries")) sums[e.at("key")] = e.at("checksum");
  }
  std::map<std::string, size_t> index;
  for (const PieceInfo& info : plan) {
    auto [it, fresh] = index.try_emplace(info.name, m.tensors.size());
    if (fresh) m.tensors.push_back({.name = info.name, .shape = info.shape, .dtype = info.dtype});
    const std::string key = piece_key(info.name, info.box);
    m.tensors[it->second].boxes.push_back(
        {.box = info.box, .file = file_name(info.writer), .key = key, .checksum = sums.at(key)});
  }
  return m;
}

// Every rank's outcome of a phase: throws the first failure on every rank (exit 1).
void agree_on_outcome(dist::Communicator& world, const std::string& mine, const char* what) {
  const std::vector<std::string> all = dist::all_gather_text(world, mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty())
      throw AgreedError(fmt::format("{} failed on rank {}: {}", what, r, all[r]), 1);
}

}  // namespace

struct Checkpointer::Pending {
  CheckpointMeta meta;
  std::vector<PieceInfo> plan;
  std::string partial;
  // What this rank writes: under async, views of the live state until the writer has copied them.
  std::vector<std::pair<std::string, at::Tensor>> entries;
  std::vector<WrittenEntry> written;
  int64_t file_bytes = 0;
  std::string error;  // the write's failure, if any
  Clock::time_point start;
  std::atomic<bool> done{false};
  bool copied = false;  // async: the writer holds its own copy; the state may change
  std::mutex mutex;
  std::condition_variable copied_cv;
  std::thread thread;
};

Checkpointer::Checkpointer(SaveOptions options, dist::Communicator& world) : options_(std::move(options)), world_(world) {}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

std::string Checkpointer::write_file(Pending& p) {
  try {
    if (!p.entries.empty()) {
      const std::string path = (fs::path(p.partial) / file_name(world_.rank())).string();
      p.written = write_tensor_file(path, p.entries, {{"format", "loom-checkpoint"}, {"step", std::to_string(p.meta.step)}});
      p.file_bytes = static_cast<int64_t>(fs::file_size(path));
    }
    if (options_.after_file) options_.after_file(p.meta.step);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

double Checkpointer::save(const CheckpointMeta& meta, const std::vector<TensorPiece>& pieces) {
  if (pending_) finish();
  const auto start = Clock::now();
  auto p = std::make_unique<Pending>();
  p->meta = meta;
  p->start = start;
  p->plan = plan_writers(dist::all_gather_text(world_, describe(pieces).dump()));
  std::string made;
  if (world_.rank() == 0) {
    try {
      p->partial = begin_partial(options_.dir, meta.step);
    } catch (const std::exception& e) {
      made = e.what();
    }
  }
  agree_on_outcome(world_, made, "the checkpoint save");
  p->partial = (fs::path(options_.dir) / partial_name(meta.step)).string();
  std::map<std::string, const TensorPiece*> mine;
  for (const TensorPiece& piece : pieces) mine.emplace(piece_key(piece.name, piece.box), &piece);
  for (const PieceInfo& info : p->plan) {
    if (info.writer != world_.rank()) continue;
    const TensorPiece& piece = *mine.at(piece_key(info.name, info.box));
    // A view when it is one; a device's tensor is copied to the host here, at the step it belongs to.
    p->entries.emplace_back(piece_key(piece.name, piece.box), piece.data.to(at::kCPU).contiguous());
  }
  pending_ = std::move(p);
  if (!options_.async) {
    pending_->error = write_file(*pending_);
    pending_->done = true;
    commit();
  } else {
    Pending* raw = pending_.get();
    raw->thread = std::thread([this, raw] { write_async(*raw); });
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The writer thread: a copy of every entry (the state may change once it is taken), then the file.
// The copy is a plain memcpy, not a tensor operation: with an ATen copy here the step beside it
// ran measurably slower (docs/benchmarks.md; likely a second OpenMP team, this thread's own,
// competing with the step's). The thread runs at a lower priority, so training keeps the cores it
// needs and the writer takes the rest.
void Checkpointer::write_async(Pending& p) {
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);  // this thread only (Linux); best effort
  try {
    for (auto& entry : p.entries) {
      at::Tensor copy = at::empty(entry.second.sizes(), entry.second.options());
      std::memcpy(copy.data_ptr(), entry.second.data_ptr(), entry.second.nbytes());
      entry.second = std::move(copy);
    }
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  {
    const std::lock_guard<std::mutex> lock(p.mutex);
    p.copied = true;
  }
  p.copied_cv.notify_all();
  if (p.error.empty()) p.error = write_file(p);
  p.done = true;
}

void Checkpointer::before_update() {
  if (!pending_) return;
  std::unique_lock<std::mutex> lock(pending_->mutex);
  pending_->copied_cv.wait(lock, [&] { return pending_->copied; });
}

void Checkpointer::poll() {
  if (!pending_) return;
  at::Tensor done = at::full({1}, pending_->done ? 1 : 0, at::TensorOptions().dtype(at::kLong));
  world_.all_reduce(done, dist::ReduceOp::Sum);  // a sum: every rank must be done, and every rank learns it
  if (done.item<int64_t>() == world_.size()) commit();
}

void Checkpointer::finish() {
  if (!pending_) return;
  if (pending_->thread.joinable()) pending_->thread.join();
  commit();
}

void Checkpointer::commit() {
  if (pending_->thread.joinable()) pending_->thread.join();
  std::unique_ptr<Pending> p = std::move(pending_);
  // Each rank's outcome: its error, or the checksums of what it wrote.
  nlohmann::json report = {{"error", p->error}, {"file_bytes", p->file_bytes}, {"entries", nlohmann::json::array()}};
  for (const WrittenEntry& e : p->written)
    report["entries"].push_back({{"key", e.key}, {"checksum", checksum_text(e.checksum)}});
  const std::vector<std::string> reports = dist::all_gather_text(world_, report.dump());
  for (size_t r = 0; r < reports.size(); ++r) {
    const std::string error = nlohmann::json::parse(reports[r]).at("error");
    if (!error.empty())
      throw AgreedError(fmt::format("the checkpoint of step {} could not be written on rank {}: {}; the latest complete "
                                    "checkpoint is still {}", p->meta.step, r, error, last_.empty() ? "the earlier one" : last_),
                        1);
  }
  std::string failure;
  if (world_.rank() == 0) {
    try {
      const std::string path = (fs::path(p->partial) / "manifest.json").string();
      write_synced(path, manifest_text(build_manifest(p->meta, p->plan, reports)));
      commit_partial(options_.dir, p->meta.step, options_.keep, run_id_of(p->meta.state).value_or(""));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  agree_on_outcome(world_, failure, "committing the checkpoint");
  last_ = (fs::path(options_.dir) / step_name(p->meta.step)).string();
  last_seconds_ = std::chrono::duration<double>(Clock::now() - p->start).count();
  last_bytes_ = p->file_bytes;
}

at::Tensor read_box(const std::string& dir, const StoredTensor& tensor, const StoredBox& box, TensorFiles& files) {
  auto& reader = files[box.file];
  if (!reader) reader = std::make_unique<TensorFileReader>((fs::path(dir) / box.file).string());
  at::Tensor data = reader->read(box.key);
  LOOM_CHECK_INPUT(data.sizes().vec() == box.box.size && dtype_name(data.scalar_type()) == tensor.dtype,
                   "checkpoint file {}: tensor {} is {} of [{}], the manifest says {} of [{}]", reader->path(), box.key,
                   dtype_name(data.scalar_type()), fmt::join(data.sizes(), ", "), tensor.dtype,
                   fmt::join(box.box.size, ", "));
  const std::string sum = checksum_text(checksum(data.data_ptr(), data.nbytes()));
  LOOM_CHECK_INPUT(sum == box.checksum, "checkpoint file {}: tensor {} {} fails its checksum (stored {}, read {}); hint: "
                   "the file is damaged, resume from another checkpoint", reader->path(), tensor.name, box.box.text(),
                   box.checksum, sum);
  return data;
}

void check_files(const std::string& dir, const Manifest& manifest) {
  for (const StoredFile& f : manifest.files) {
    const fs::path path = fs::path(dir) / f.name;
    std::error_code ec;
    LOOM_CHECK_INPUT(fs::is_regular_file(path, ec), "checkpoint {}: file {} is missing; hint: the checkpoint is "
                     "incomplete, resume from another one", dir, f.name);
    const auto bytes = static_cast<int64_t>(fs::file_size(path, ec));
    LOOM_CHECK_INPUT(bytes == f.bytes, "checkpoint {}: file {} has {} bytes, the manifest says {}; hint: the file is "
                     "truncated or replaced, resume from another checkpoint", dir, f.name, bytes, f.bytes);
  }
}

namespace {

// The parts of stored boxes a rank's pieces need, read and verified; then the assignments to make.
// Only each part is kept, not the box it came from: a box that holds a whole tensor (one process
// saved it, or `loom ckpt import` wrote it) costs every rank its own share plus one box at a time,
// not the whole model.
struct LoadPlan {
  struct Copy {
    const TensorPiece* piece;
    Box part;
    at::Tensor data;  // the part's values
  };
  std::vector<Copy> copies;
  int64_t bytes = 0;
};

LoadPlan read_needed(const std::string& dir, const Manifest& manifest, const std::vector<TensorPiece>& pieces) {
  LoadPlan plan;
  TensorFiles files;
  std::string last_source;  // the box read last, kept for the next piece that needs it too
  at::Tensor last_data;
  for (const TensorPiece& piece : pieces) {
    const StoredTensor* t = manifest.find(piece.name);
    LOOM_CHECK_INPUT(t != nullptr, "checkpoint {} has no tensor {}; hint: it was saved from another model", dir, piece.name);
    LOOM_CHECK_INPUT(t->shape == piece.full_shape, "checkpoint {}: tensor {} has shape [{}], this run's is [{}]; hint: "
                     "it was saved from another model", dir, piece.name, fmt::join(t->shape, ", "),
                     fmt::join(piece.full_shape, ", "));
    at::Tensor covered = at::zeros(piece.box.size, at::TensorOptions().dtype(at::kBool));
    for (const StoredBox& b : t->boxes) {
      const std::optional<Box> part = intersect(b.box, piece.box);
      if (!part) continue;
      const std::string source = b.file + "/" + b.key;
      if (source != last_source) {
        last_data = read_box(dir, *t, b, files);
        last_source = source;
        plan.bytes += static_cast<int64_t>(last_data.nbytes());
      }
      const at::Tensor& data = last_data;
      view_of(covered, piece.box, *part).fill_(true);
      plan.copies.push_back({&piece, *part, *part == b.box ? data : view_of(data, b.box, *part).clone()});
    }
    LOOM_CHECK_INPUT(covered.all().item<bool>(), "checkpoint {} does not hold all of tensor {} {}; hint: a rank's file "
                     "is missing from it", dir, piece.name, piece.box.text());
  }
  return plan;
}

}  // namespace

int64_t load(const std::string& dir, const Manifest& manifest, const std::vector<TensorPiece>& pieces,
             dist::Communicator& world) {
  LoadPlan plan;
  std::exception_ptr failure;
  try {
    plan = read_needed(dir, manifest, pieces);
  } catch (const InputError&) {
    failure = std::current_exception();
  }
  dist::agree_on_input(world, failure);  // nothing is assigned unless every rank read good data
  for (const LoadPlan::Copy& c : plan.copies) {
    at::Tensor target = view_of(c.piece->data, c.piece->box, c.part);
    target.copy_(c.data);
  }
  return plan.bytes;
}

}  // namespace loom::ckpt
