#include "loom/core/live_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/output_file.h"

namespace loom {
namespace {

// Every byte of `text` to `fd`, through short writes and interrupted calls.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int open_for_append(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | flags, 0666);
  LOOM_CHECK_INPUT(fd >= 0, "cannot write '{}': {}", path, std::strerror(errno));
  return fd;
}

// The kept lines of the file a resumed run continues ("" when there is none).
std::string kept_lines(const std::string& source, const std::function<bool(std::string_view)>& keep) {
  std::ifstream in(source, std::ios::binary);
  std::stringstream whole;
  whole << in.rdbuf();
  const std::string text = whole.str();
  std::string out;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // a record cut by a killed writer
    const std::string_view line(text.data() + begin, end - begin);
    if (keep(line)) out.append(line).push_back('\n');
    begin = end + 1;
  }
  return out;
}

}  // namespace

struct LiveFile::State {
  std::string path;
  std::mutex mutex;
  int fd = -1;
  bool created = false;  // by open(): removed again unless begun
  bool begun = false;
};

LiveFile::LiveFile() = default;
LiveFile::LiveFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
LiveFile::~LiveFile() {
  try {
    close();
  } catch (...) {  // a destructor reports nothing; the records written so far are on the disk
  }
}
LiveFile::LiveFile(LiveFile&&) noexcept = default;
LiveFile& LiveFile::operator=(LiveFile&& other) noexcept {
  if (this != &other) {
    try {
      close();
    } catch (...) {
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

LiveFile LiveFile::open(const std::string& path) {
  auto state = std::make_unique<State>();
  state->path = path;
  state->created = ::access(path.c_str(), F_OK) != 0;
  state->fd = open_for_append(path, 0);
  return LiveFile(std::move(state));
}

void LiveFile::start() {
  LOOM_CHECK(state_ && state_->fd >= 0, "a live file starts once opened");
  LOOM_CHECK(::ftruncate(state_->fd, 0) == 0, "cannot write '{}': {}", state_->path, std::strerror(errno));
  state_->begun = true;
}

void LiveFile::resume(const std::function<bool(std::string_view)>& keep) {
  LOOM_CHECK(state_ && state_->fd >= 0, "a live file resumes once opened");
  const std::string& path = state_->path;
  const std::string legacy = OutputFile::temporary_for(path);
  const bool from_legacy = state_->created && ::access(legacy.c_str(), F_OK) == 0;
  const std::string kept = kept_lines(from_legacy ? legacy : path, keep);
  OutputFile rewritten(path);  // the kept records replace the file in one rename
  rewritten.write(kept);
  rewritten.commit();
  if (from_legacy) ::unlink(legacy.c_str());
  ::close(state_->fd);  // it named the file the rename replaced
  state_->fd = open_for_append(path, 0);
  state_->begun = true;
}

bool LiveFile::is_open() const {
  if (!state_) return false;
  const std::lock_guard lock(state_->mutex);
  return state_->fd >= 0;
}

const std::string& LiveFile::path() const {
  static const std::string none;
  return state_ ? state_->path : none;
}

void LiveFile::append(std::string_view bytes) {
  if (!state_) return;
  const std::lock_guard lock(state_->mutex);
  if (state_->fd < 0) return;
  LOOM_CHECK(write_all(state_->fd, bytes), "writing '{}' failed: {}", state_->path, std::strerror(errno));
}

void LiveFile::close(std::string_view tail) {
  if (!state_) return;
  const std::lock_guard lock(state_->mutex);
  if (state_->fd < 0) return;
  const bool written = state_->begun ? write_all(state_->fd, tail) : true;
  const int saved = errno;
  const bool closed = ::close(state_->fd) == 0;
  state_->fd = -1;
  if (!state_->begun && state_->created) ::unlink(state_->path.c_str());  // opened for a run that never began
  LOOM_CHECK(written && closed, "writing '{}' failed: {}", state_->path, std::strerror(written ? errno : saved));
}

}  // namespace loom
