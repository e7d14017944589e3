#include "loom/data/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "loom/core/error.h"

namespace loom::data {

std::string missing_file_text(const std::string& kind, const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  const std::string where = p.is_relative() ? fmt::format(" (a relative path is read from the current folder, {}, "
                                                          "not from the config file's)",
                                                          std::filesystem::current_path(ec).string())
                                            : "";
  return fmt::format("{} '{}' does not exist or is not a regular file{}", kind, path, where);
}

DataFile::DataFile(const std::string& path, std::string kind) : path_(path), kind_(std::move(kind)) {
  struct stat st {};
  LOOM_CHECK_INPUT(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), "{}", missing_file_text(kind_, path));
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK_INPUT(fd_ >= 0, "cannot open {} '{}': {}", kind_, path, std::strerror(errno));
  // The snapshot every read compares against: of the file opened, not of the name stat-ed above.
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw InputError(missing_file_text(kind_, path));
  }
  size_ = static_cast<int64_t>(st.st_size);
  mtime_ = st.st_mtim;
}

DataFile::~DataFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DataFile::changed(int64_t now) const {
  throw Error(fmt::format("{} '{}' changed during the run ({} bytes at start, now {}{}); hint: do not rewrite a data "
                          "file while loom trains on it",
                          kind_, path_, size_, now, now == size_ ? ", rewritten in place" : ""));
}

void DataFile::read(int64_t offset, int64_t count, void* out) const {
  auto* p = static_cast<char*>(out);
  int64_t done = 0;
  while (done < count) {
    const ssize_t got = ::pread(fd_, p + done, static_cast<size_t>(count - done), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    LOOM_CHECK(got >= 0, "reading {} '{}' at byte {} failed: {}", kind_, path_, offset + done, std::strerror(errno));
    if (got == 0) break;  // end of file: it shrank (reported below)
    done += got;
  }
  struct stat st {};
  LOOM_CHECK(::fstat(fd_, &st) == 0, "cannot stat {} '{}': {}", kind_, path_, std::strerror(errno));
  const auto now = static_cast<int64_t>(st.st_size);
  if (done < count || now != size_ || st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec)
    changed(now);
}

}  // namespace loom::data
