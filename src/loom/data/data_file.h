#pragma once
// NOTE [Data files change under a run]: loom reads token and clicks files with positioned reads
// (pread), never a memory mapping. A mapped file that shrinks under the reader kills the process
// with SIGBUS and no message; a read returns short instead. Every read also compares the file's
// size and modification time with those at open, so a file rewritten or truncated while a run
// trains on it ends the run with a loom::Error that says so, not with a crash or with windows of
// a different file. A file replaced by rename is not a change: the open descriptor keeps reading
// the file that was opened.
#include <cstdint>
#include <ctime>
#include <string>

namespace loom::data {

// "data file 'x.bin' does not exist or is not a regular file", saying for a relative path which
// folder it was read from (the current one, not the config file's).
std::string missing_file_text(const std::string& kind, const std::string& path);

class DataFile {
 public:
  // Opens `path`, which `kind` ("data file", "clicks file") names in errors. InputError when it
  // does not exist, is not a regular file, or cannot be opened.
  DataFile(const std::string& path, std::string kind);
  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // bytes at open

  // Reads bytes [offset, offset + count) into `out`, which must lie within size(). Throws
  // loom::Error when the file shrank or was modified since it was opened (NOTE above), or when
  // the read fails. Safe to call from several threads.
  void read(int64_t offset, int64_t count, void* out) const;

  // The opening scan reads a file in pieces of about this size (a multiple of 8, so whole ids and
  // records of 8-byte fields fit).
  static constexpr int64_t kScanChunk = int64_t{1} << 20;

 private:
  [[noreturn]] void changed(int64_t now) const;
  std::string path_, kind_;
  int fd_ = -1;
  int64_t size_ = 0;
  timespec mtime_{};
};

}  // namespace loom::data
