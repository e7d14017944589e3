#include "loom/ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "loom/core/error.h"

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

void check_writable_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    LOOM_CHECK_INPUT(fs::is_directory(dir, ec), "checkpoint.dir = \"{}\" is a file, not a directory; hint: name a "
                     "directory (it is made if missing)", dir);
    LOOM_CHECK_INPUT(::access(dir.c_str(), W_OK | X_OK) == 0,
                     "checkpoint.dir = \"{}\" is not writable ({}); hint: choose a directory you may write", dir,
                     std::strerror(errno));
    return;
  }
  fs::path parent = fs::absolute(dir, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec) && parent != parent.root_path()) parent = parent.parent_path();
  LOOM_CHECK_INPUT(fs::is_directory(parent, ec), "checkpoint.dir = \"{}\" cannot be made: {} is not a directory", dir,
                   parent.string());
  LOOM_CHECK_INPUT(::access(parent.c_str(), W_OK | X_OK) == 0,
                   "checkpoint.dir = \"{}\" cannot be made: {} is not writable ({})", dir, parent.string(),
                   std::strerror(errno));
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

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::ifstream in((fs::path(dir) / "latest").string());
  std::string name;
  std::error_code ec;
  if (in >> name && step_of(name, false) >= 0 && fs::is_regular_file(fs::path(dir) / name / "manifest.json", ec))
    return (fs::path(dir) / name).string();
  const auto all = complete_checkpoints(dir);  // `latest` is missing or stale: the highest complete step
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::string checkpoint_of(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / "manifest.json", ec)) return dir;
  const std::optional<std::string> latest = latest_checkpoint(dir);
  return latest ? *latest : dir;
}

std::string begin_partial(const std::string& dir, int64_t step) {
  fs::create_directories(dir);
  const fs::path partial = fs::path(dir) / partial_name(step);
  fs::remove_all(partial);
  fs::create_directory(partial);
  return partial.string();
}

void commit_partial(const std::string& dir, int64_t step, int64_t keep) {
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
  const auto all = complete_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i)
    if (all[i].first != step) fs::remove_all(all[i].second, ec);
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const int64_t pending = step_of(e.path().filename().string(), true);
    if (pending >= 0 && pending != step) fs::remove_all(e.path(), ec);
  }
}

}  // namespace loom::ckpt
