#include "loom/ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "loom/ckpt/manifest.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"

namespace loom::ckpt {
namespace fs = std::filesystem;
namespace {

// The step of a name of ours ("step-0000100" or ".step-0000100.partial"), or -1.
int64_t step_of(const std::string& name, bool partial) {
  static const std::regex complete("step-([0-9]{7,})"), pending("\\.step-([0-9]{7,})\\.partial");
  std::smatch m;
  if (!std::regex_match(name, m, partial ? pending : complete)) return -1;
  try {
    return std::stoll(m[1].str());
  } catch (const std::out_of_range&) {
    return -1;
  }
}

}  // namespace

std::string step_name(int64_t step) { return fmt::format("step-{:07d}", step); }
std::string partial_name(int64_t step) { return fmt::format(".step-{:07d}.partial", step); }

void write_synced(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    out.flush();
    LOOM_CHECK(out.good(), "cannot write {}", path);
  }
  sync_path(path);
}

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0, "cannot open {} to sync it: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  LOOM_CHECK(rc == 0, "cannot sync {}: {}", path, std::strerror(errno));
}

namespace {

// Whether the file system holding `dir` is mounted read-only: access() says yes to root there.
bool read_only(const fs::path& dir, std::string* why) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0 || (st.f_flag & ST_RDONLY) == 0) return false;
  *why = "a read-only file system";
  return true;
}

// Whether a directory can be made in `parent`, tried (and removed at once): access() says yes to
// root everywhere, also where the file system refuses (/proc). Only for a checkpoint.dir still to be
// made, whose parent gains an entry anyway; the probe's name is this process's.
bool accepts_new_entries(const fs::path& parent, std::string* why) {
  const fs::path probe = parent / fmt::format(".loom-probe-{}", ::getpid());
  if (::mkdir(probe.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = std::strerror(errno);
    return false;
  }
  ::rmdir(probe.c_str());
  return true;
}

}  // namespace

void check_writable_dir(const std::string& dir) {
  std::error_code ec;
  std::string why;
  if (fs::exists(dir, ec)) {
    LOOM_CHECK_INPUT(fs::is_directory(dir, ec), "checkpoint.dir = \"{}\" is a file, not a directory; hint: name a "
                     "directory (it is made if missing)", dir);
    LOOM_CHECK_INPUT(::access(dir.c_str(), W_OK | X_OK) == 0 && !read_only(dir, &why),
                     "checkpoint.dir = \"{}\" is not writable ({}); hint: choose a directory you may write", dir,
                     why.empty() ? std::strerror(errno) : why);
    return;
  }
  fs::path parent = fs::absolute(dir, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec) && parent != parent.root_path()) parent = parent.parent_path();
  LOOM_CHECK_INPUT(fs::is_directory(parent, ec), "checkpoint.dir = \"{}\" cannot be made: {} is not a directory", dir,
                   parent.string());
  LOOM_CHECK_INPUT(::access(parent.c_str(), W_OK | X_OK) == 0 && accepts_new_entries(parent, &why),
                   "checkpoint.dir = \"{}\" cannot be made: {} is not writable ({})", dir, parent.string(),
                   why.empty() ? std::strerror(errno) : why);
}

std::vector<std::pair<int64_t, std::string>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string(), false);
    if (step >= 0 && fs::is_regular_file(e.path() / "manifest.json", ec)) out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> run_of(const std::string& checkpoint) {
  std::ifstream in((fs::path(checkpoint) / "manifest.json").string());
  const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
  if (!m.is_object()) return std::nullopt;
  return run_id_of(m.contains("state") ? m["state"] : nlohmann::json());
}

std::string new_run_id() {
  std::random_device entropy;
  const auto now = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::seed_seq seed{entropy(), entropy(), static_cast<unsigned>(now), static_cast<unsigned>(now >> 32),
                     static_cast<unsigned>(::getpid())};
  std::mt19937_64 generator(seed);
  return fmt::format("{:016x}", generator());
}

namespace {

// The distinct runs of `all` (unreadable manifests as "?"), in step order of their first checkpoint.
std::vector<std::string> runs_in(const std::vector<std::pair<int64_t, std::string>>& all) {
  std::vector<std::string> runs;
  for (const auto& [step, path] : all) {
    const std::string run = run_of(path).value_or("?");
    if (std::find(runs.begin(), runs.end(), run) == runs.end()) runs.push_back(run);
  }
  return runs;
}

std::string step_list(const std::vector<std::pair<int64_t, std::string>>& all) {
  std::vector<std::string> names;
  for (const auto& [step, path] : all) names.push_back(fs::path(path).filename().string());
  if (names.size() > 4) names.erase(names.begin() + 1, names.end() - 2), names.insert(names.begin() + 1, "...");
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

void check_dir_for_run(const std::string& dir, const std::optional<std::string>& run) {
  std::vector<std::pair<int64_t, std::string>> others;
  for (const auto& entry : complete_checkpoints(dir))
    if (!run || run_of(entry.second) != run) others.push_back(entry);
  if (others.empty()) return;
  LOOM_CHECK_INPUT(run.has_value(), "checkpoint.dir = \"{}\" holds the checkpoints of another run ({}): a fresh run "
                   "would mix its checkpoints with them; hint: --resume auto to continue that run, or another "
                   "checkpoint.dir", dir, step_list(others));
  throw InputError(fmt::format("checkpoint.dir = \"{}\" also holds the checkpoints of another run than the one "
                               "resumed ({}): its saves could replace or prune them; hint: resume into a new or empty "
                               "checkpoint.dir, or move the other run's step directories elsewhere", dir,
                               step_list(others)));
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::ifstream in((fs::path(dir) / "latest").string());
  std::string name;
  std::error_code ec;
  if (in >> name && step_of(name, false) >= 0 && fs::is_regular_file(fs::path(dir) / name / "manifest.json", ec))
    return (fs::path(dir) / name).string();
  const auto all = complete_checkpoints(dir);  // `latest` is missing or stale: the highest complete step
  if (all.empty()) return std::nullopt;
  LOOM_CHECK_INPUT(runs_in(all).size() == 1, "{} holds the checkpoints of several runs ({}) and its `latest` names "
                   "none of them; hint: name the checkpoint to use, e.g. {}", dir, step_list(all), all.back().second);
  return all.back().second;
}

std::string checkpoint_of(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / "manifest.json", ec)) return dir;
  const std::optional<std::string> latest = latest_checkpoint(dir);
  return latest ? *latest : dir;
}

namespace {

bool is_at_or_under(const fs::path& path, const fs::path& dir) {
  return std::mismatch(dir.begin(), dir.end(), path.begin(), path.end()).first == dir.end();  // or is it
}

// The checkpoint or checkpoint folder that `path` would be written in, if any.
std::optional<fs::path> checkpoint_folder_above(const fs::path& path) {
  std::error_code ec;
  for (fs::path dir = path.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    std::ifstream latest(dir / "latest");
    std::string name;
    const bool checkpoint = step_of(dir.filename().string(), false) >= 0 && fs::is_regular_file(dir / "manifest.json", ec);
    if (checkpoint || (latest >> name && step_of(name, false) >= 0) || !complete_checkpoints(dir.string()).empty())
      return dir;
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

}  // namespace

void check_outside_checkpoints(const std::vector<PathUse>& outputs, const std::string& checkpoint_dir) {
  for (const PathUse& out : outputs) {
    const fs::path path = fs::path(canonical_name(out.path));
    LOOM_CHECK_INPUT(checkpoint_dir.empty() || !is_at_or_under(path, fs::path(canonical_name(checkpoint_dir))),
                     "{} '{}' is in checkpoint.dir = \"{}\", whose contents loom manages (step directories, "
                     "`latest`); hint: write it outside that directory", out.role, out.path, checkpoint_dir);
    const std::optional<fs::path> folder = checkpoint_folder_above(path);
    LOOM_CHECK_INPUT(!folder, "{} '{}' is inside the checkpoint folder '{}', whose contents loom manages; hint: write "
                     "it outside that directory", out.role, out.path, folder ? folder->string() : "");
  }
}

std::string begin_partial(const std::string& dir, int64_t step) {
  fs::create_directories(dir);
  const fs::path partial = fs::path(dir) / partial_name(step);
  fs::remove_all(partial);
  fs::create_directory(partial);
  return partial.string();
}

void commit_partial(const std::string& dir, int64_t step, int64_t keep, const std::string& run) {
  const fs::path root(dir), partial = root / partial_name(step), target = root / step_name(step);
  sync_path(partial.string());
  const fs::path aside = root / fmt::format(".{}.replaced", step_name(step));
  std::error_code ec;
  fs::remove_all(aside, ec);
  if (fs::exists(target, ec)) fs::rename(target, aside);  // a checkpoint of this step from an earlier run
  fs::rename(partial, target);
  sync_path(dir);
  write_synced((root / "latest.partial").string(), step_name(step) + "\n");  // replaced in one rename
  fs::rename(root / "latest.partial", root / "latest");
  sync_path(dir);
  fs::remove_all(aside, ec);
  std::vector<std::pair<int64_t, std::string>> ours;  // NOTE [A checkpoint folder belongs to one run]
  for (const auto& entry : complete_checkpoints(dir))
    if (run_of(entry.second) == run) ours.push_back(entry);
  for (size_t i = 0; i + static_cast<size_t>(keep) < ours.size(); ++i)
    if (ours[i].first != step) fs::remove_all(ours[i].second, ec);
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const int64_t pending = step_of(e.path().filename().string(), true);
    if (pending >= 0 && pending != step) fs::remove_all(e.path(), ec);
  }
}

}  // namespace loom::ckpt
