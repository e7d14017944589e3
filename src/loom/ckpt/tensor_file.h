#pragma once
// One rank's tensor data file of a checkpoint, in the safetensors layout: an 8-byte little-endian
// header length N, N bytes of JSON {"KEY": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
// ..., "__metadata__": {..}} padded with spaces to a multiple of 8, then the raw little-endian
// data, each entry at [8 + N + b, 8 + N + e). Any safetensors reader opens it.
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::ckpt {

// The 64-bit XXH3 hash of `bytes`: the checksum of every stored box.
uint64_t checksum(const void* bytes, size_t size);
std::string checksum_text(uint64_t sum);  // 16 hex digits

// "F32", "F64", "BF16", "F16", "I64", "I32", "U8", "BOOL"; InputError for a type it cannot store.
std::string dtype_name(at::ScalarType type);
// The type of a dtype name; InputError naming `origin` for an unknown one.
at::ScalarType dtype_of(const std::string& name, const std::string& origin);

struct WrittenEntry {
  std::string key;
  int64_t bytes = 0;
  uint64_t checksum = 0;
};

// Writes `entries` (key, contiguous CPU tensor) to `path` and syncs it to the disk; returns each
// entry's size and checksum. Error naming the path when the disk refuses.
std::vector<WrittenEntry> write_tensor_file(const std::string& path,
                                            const std::vector<std::pair<std::string, at::Tensor>>& entries,
                                            const std::map<std::string, std::string>& metadata = {});

// write_tensor_file for a file the user named: written beside `path` under OutputFile's temporary
// name and renamed over it only once whole (NOTE [Output files]); the temporary is removed on failure.
void write_tensor_file_replacing(const std::string& path,
                                 const std::vector<std::pair<std::string, at::Tensor>>& entries,
                                 const std::map<std::string, std::string>& metadata = {});

// Reads a tensor file's header, checked against the file's size before anything is allocated:
// a header that is not JSON, too large, or whose entries run past the data is InputError naming
// the file.
class TensorFileReader {
 public:
  struct Entry {
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // bytes from the start of the file
  };
  explicit TensorFileReader(std::string path);
  ~TensorFileReader();
  TensorFileReader(const TensorFileReader&) = delete;
  TensorFileReader& operator=(const TensorFileReader&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return file_bytes_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The entry's bytes as a tensor of its dtype and shape; InputError if the key is absent or
  // the file is shorter than its header says.
  at::Tensor read(const std::string& key) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace loom::ckpt
