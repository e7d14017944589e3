#include "loom/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/units.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string directory_of(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}

void check_one_output(const PathUse& out) {
  LOOM_CHECK_INPUT(!out.path.empty() && out.path.back() != '/',
                   "{} '{}' names a directory; hint: give a file name", out.role, out.path);
  struct stat st {};
  if (::stat(out.path.c_str(), &st) == 0) {
    LOOM_CHECK_INPUT(!S_ISDIR(st.st_mode), "{} '{}' is a directory; hint: give the path of a file inside it",
                     out.role, out.path);
    LOOM_CHECK_INPUT(S_ISREG(st.st_mode),
                     "{} '{}' is not a regular file (loom writes a new file and renames it into place); hint: "
                     "give a file name",
                     out.role, out.path);
  }
  const std::string dir = directory_of(out.path);
  struct stat dir_st {};
  LOOM_CHECK_INPUT(::stat(dir.c_str(), &dir_st) == 0 && S_ISDIR(dir_st.st_mode),
                   "{} {}: the directory '{}' does not exist; hint: create it first", out.role, out.path, dir);
  LOOM_CHECK_INPUT(::access(dir.c_str(), W_OK | X_OK) == 0, "{} {}: the directory '{}' is not writable", out.role,
                   out.path, dir);
}

}  // namespace

std::string canonical_name(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.string();
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return canonical_name(a) == canonical_name(b);
}

void check_output_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const PathUse& out = outputs[i];
    check_one_output(out);
    for (const PathUse& in : inputs) {
      LOOM_CHECK_INPUT(in.path.empty() || !same_file(out.path, in.path),
                       "{} '{}' is the same file as {} '{}': loom would overwrite its own input; hint: write to "
                       "another path",
                       out.role, out.path, in.role, in.path);
    }
    for (size_t j = 0; j < i; ++j) {
      LOOM_CHECK_INPUT(!same_file(out.path, outputs[j].path),
                       "{} '{}' and {} '{}' are the same file: one would overwrite the other; hint: give each its "
                       "own path",
                       outputs[j].role, outputs[j].path, out.role, out.path);
    }
  }
}

void check_free_space(const PathUse& out, int64_t bytes) {
  struct statvfs fs_stat {};
  const std::string dir = directory_of(out.path);
  if (::statvfs(dir.c_str(), &fs_stat) != 0) return;  // unknown: the write itself reports a full disk
  const double free_bytes = static_cast<double>(fs_stat.f_bavail) * static_cast<double>(fs_stat.f_frsize);
  LOOM_CHECK_INPUT(static_cast<double>(bytes) <= free_bytes,
                   "{} '{}' needs {} but the file system of '{}' has {} free; hint: write fewer or free space",
                   out.role, out.path, format_bytes(static_cast<double>(bytes)), dir, format_bytes(free_bytes));
}

std::string OutputFile::temporary_for(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / ("." + p.filename().string() + ".loom-partial")).string();
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)), temporary_(temporary_for(path_)) {
  ::unlink(temporary_.c_str());  // a stale temporary of a run that was killed
  const int fd = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  LOOM_CHECK_INPUT(fd >= 0, "cannot write '{}' (its temporary '{}': {})", path_, temporary_, std::strerror(errno));
  file_ = ::fdopen(fd, "w");
  if (file_ == nullptr) {
    ::close(fd);
    discard();
    throw Error(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)));
  }
}

OutputFile::~OutputFile() { discard(); }

OutputFile::OutputFile(OutputFile&& other) noexcept { *this = std::move(other); }

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_), temporary_ = std::move(other.temporary_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

void OutputFile::discard() noexcept {
  if (file_ != nullptr) std::fclose(file_);
  if (file_ != nullptr || !temporary_.empty()) ::unlink(temporary_.c_str());
  file_ = nullptr;
  temporary_.clear();
}

void OutputFile::write(std::string_view bytes) {
  LOOM_CHECK(file_ != nullptr, "'{}' is closed", path_);
  LOOM_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size(), "writing '{}' failed: {}", path_,
             std::strerror(errno));
}

void OutputFile::flush() {
  if (file_ != nullptr) LOOM_CHECK(std::fflush(file_) == 0, "writing '{}' failed: {}", path_, std::strerror(errno));
}

void OutputFile::commit() {
  LOOM_CHECK(file_ != nullptr, "'{}' is closed", path_);
  const bool written = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int saved = errno;
  std::FILE* file = std::exchange(file_, nullptr);
  const bool closed = std::fclose(file) == 0;
  LOOM_CHECK(written && closed, "writing '{}' failed: {}", path_, std::strerror(written ? errno : saved));
  LOOM_CHECK(::rename(temporary_.c_str(), path_.c_str()) == 0, "cannot rename '{}' to '{}': {}", temporary_, path_,
             std::strerror(errno));
  temporary_.clear();
}

}  // namespace loom
