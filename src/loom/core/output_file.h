#pragma once
// NOTE [Output files]: loom never loses a file the user gave it, and never leaves half a file
// under a name the user chose.
//  - Before any work, every path loom will write is checked against every path it reads and
//    against the other outputs by file identity (device and inode; for an output that does not
//    exist yet, its canonical path), and checked writable (check_output_paths). A clash is bad
//    input naming both paths.
//  - An OutputFile writes to a temporary beside its target, `.NAME.loom-partial` in the same
//    directory (so the rename cannot cross file systems), and renames it over the target only on
//    commit(). An OutputFile destroyed without commit() removes its temporary; a temporary left by
//    a killed run is removed when the next run opens the same output.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// A path and what it is to the user ("--metrics", "data.source", "the config file"): errors
// name both.
struct PathUse {
  std::string path;
  std::string role;
};

// Throws InputError when an output is a directory or a non-regular file, its directory is missing
// or not writable, or it is the same file as an input or another output.
void check_output_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs);

// Throws InputError when the file system holding `out.path` has fewer than `bytes` free.
void check_free_space(const PathUse& out, int64_t bytes);

// The canonical form of a path that may not exist yet: its existing prefix resolved (the path as
// given when that fails).
std::string canonical_name(const std::string& path);

// True when `a` and `b` name the same file (or would, for paths that do not exist yet).
bool same_file(const std::string& a, const std::string& b);

class OutputFile {
 public:
  OutputFile() = default;  // closed: writes are refused
  // Creates the temporary for `path` (removing a stale one of ours); InputError when it cannot.
  explicit OutputFile(std::string path);
  ~OutputFile();  // removes the temporary unless committed
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  void write(std::string_view bytes);  // Error naming the path when the disk refuses
  void flush();                        // to the OS: a reader of the temporary sees every byte
  // Flushes, syncs and renames the temporary over the target; the file is then closed.
  void commit();
  static std::string temporary_for(const std::string& path);

 private:
  void discard() noexcept;
  std::string path_, temporary_;
  std::FILE* file_ = nullptr;
};

}  // namespace loom
