#include "loom/ckpt/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <filesystem>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/core/json_integer.h"

namespace loom::ckpt {
namespace {

// A header larger than this is not one loom wrote (its own are a few hundred bytes per entry).
constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;

struct TypeName {
  at::ScalarType type;
  const char* name;
};
constexpr TypeName kTypes[] = {{at::kFloat, "F32"}, {at::kDouble, "F64"}, {at::kBFloat16, "BF16"},
                               {at::kHalf, "F16"},  {at::kLong, "I64"},   {at::kInt, "I32"},
                               {at::kByte, "U8"},   {at::kBool, "BOOL"}};

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    LOOM_CHECK(n > 0, "cannot write checkpoint file {}: {}", path, std::strerror(errno));
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void read_all(int fd, char* data, size_t size, int64_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    LOOM_CHECK_INPUT(n > 0, "checkpoint file {} is shorter than its header says (at byte {}); hint: the file is "
                     "truncated, resume from an earlier checkpoint", path, offset);
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
}

}  // namespace

uint64_t checksum(const void* bytes, size_t size) { return XXH3_64bits(bytes, size); }

std::string checksum_text(uint64_t sum) { return fmt::format("{:016x}", sum); }

std::string dtype_name(at::ScalarType type) {
  for (const TypeName& t : kTypes)
    if (t.type == type) return t.name;
  throw InputError(fmt::format("a checkpoint cannot store tensors of type {}", c10::toString(type)));
}

at::ScalarType dtype_of(const std::string& name, const std::string& origin) {
  for (const TypeName& t : kTypes)
    if (name == t.name) return t.type;
  throw InputError(fmt::format("{}: unknown tensor dtype \"{}\" (known: F32, F64, BF16, F16, I64, I32, U8)", origin, name));
}

std::vector<WrittenEntry> write_tensor_file(const std::string& path,
                                            const std::vector<std::pair<std::string, at::Tensor>>& entries,
                                            const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<WrittenEntry> written;
  int64_t offset = 0;
  for (const auto& [key, tensor] : entries) {
    LOOM_CHECK(tensor.is_contiguous() && tensor.device().is_cpu(), "[ckpt] {} is not a contiguous CPU tensor", key);
    const auto bytes = static_cast<int64_t>(tensor.nbytes());
    header[key] = {{"dtype", dtype_name(tensor.scalar_type())}, {"shape", tensor.sizes().vec()},
                   {"data_offsets", {offset, offset + bytes}}};
    written.push_back({key, bytes, checksum(tensor.data_ptr(), static_cast<size_t>(bytes))});
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_CHECK(fd >= 0, "cannot create checkpoint file {}: {}", path, std::strerror(errno));
  try {
    char length[8];
    const auto n = static_cast<uint64_t>(text.size());
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    write_all(fd, length, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const auto& entry : entries)
      write_all(fd, static_cast<const char*>(entry.second.data_ptr()), entry.second.nbytes(), path);
    LOOM_CHECK(::fsync(fd) == 0, "cannot sync checkpoint file {}: {}", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  LOOM_CHECK(::close(fd) == 0, "cannot close checkpoint file {}: {}", path, std::strerror(errno));
  return written;
}

TensorFileReader::TensorFileReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK_INPUT(fd_ >= 0, "cannot open checkpoint file {}: {}", path_, std::strerror(errno));
  // A refused file is closed here: the destructor of an object whose constructor threw never runs.
  struct CloseUnlessKept {
    int& fd;
    bool keep = false;
    ~CloseUnlessKept() {
      if (!keep) ::close(fd), fd = -1;
    }
  } guard{fd_};
  struct stat st {};
  LOOM_CHECK_INPUT(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), "checkpoint file {} is not a regular file", path_);
  file_bytes_ = st.st_size;
  LOOM_CHECK_INPUT(file_bytes_ >= 8, "checkpoint file {} has {} bytes, fewer than its 8-byte header length", path_,
                   file_bytes_);
  unsigned char length[8];
  read_all(fd_, reinterpret_cast<char*>(length), 8, 0, path_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  LOOM_CHECK_INPUT(n <= static_cast<uint64_t>(std::min(kMaxHeaderBytes, file_bytes_ - 8)),
                   "checkpoint file {} declares a header of {} bytes in a file of {} bytes; hint: the file is "
                   "truncated or not a tensor file", path_, n, file_bytes_);
  std::string text(n, '\0');
  read_all(fd_, text.data(), n, 8, path_);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("checkpoint file {}: the header is not JSON ({})", path_, e.what()));
  }
  LOOM_CHECK_INPUT(header.is_object(), "checkpoint file {}: the header is not a JSON object", path_);
  const int64_t data_start = 8 + static_cast<int64_t>(n), data_bytes = file_bytes_ - data_start;
  for (const auto& [key, value] : header.items()) {
    try {
      if (key == "__metadata__") {
        metadata_ = value.get<std::map<std::string, std::string>>();
        continue;
      }
      Entry e{.dtype = dtype_of(value.at("dtype").get<std::string>(), path_),
              .shape = json_integers(value.at("shape"))};  // NOTE [Integers in JSON]
      const auto offsets = json_integers(value.at("data_offsets"));
      LOOM_CHECK_INPUT(offsets.size() == 2 && 0 <= offsets[0] && offsets[0] <= offsets[1] && offsets[1] <= data_bytes,
                       "checkpoint file {}: tensor {} lies outside the file's {} data bytes; hint: the file is "
                       "truncated", path_, key, data_bytes);
      int64_t numel = 1;
      for (int64_t s : e.shape) {
        LOOM_CHECK_INPUT(s >= 0 && (s == 0 || numel <= std::numeric_limits<int64_t>::max() / s),
                         "checkpoint file {}: tensor {} has a bad shape", path_, key);
        numel *= s;
      }
      LOOM_CHECK_INPUT(numel == (offsets[1] - offsets[0]) / static_cast<int64_t>(c10::elementSize(e.dtype)) &&
                           (offsets[1] - offsets[0]) % static_cast<int64_t>(c10::elementSize(e.dtype)) == 0,
                       "checkpoint file {}: tensor {} holds {} bytes, not its shape's", path_, key,
                       offsets[1] - offsets[0]);
      e.begin = data_start + offsets[0];
      e.end = data_start + offsets[1];
      entries_.emplace(key, std::move(e));
    } catch (const nlohmann::json::exception& ex) {
      throw InputError(fmt::format("checkpoint file {}: entry {} is malformed ({})", path_, key, ex.what()));
    }
  }
  guard.keep = true;
}

TensorFileReader::~TensorFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

at::Tensor TensorFileReader::read(const std::string& key) const {
  const auto it = entries_.find(key);
  LOOM_CHECK_INPUT(it != entries_.end(), "checkpoint file {} has no tensor {}; hint: a rank's file is missing or "
                   "from another checkpoint", path_, key);
  const Entry& e = it->second;
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  read_all(fd_, static_cast<char*>(out.data_ptr()), static_cast<size_t>(e.end - e.begin), e.begin, path_);
  return out;
}

void write_tensor_file_replacing(const std::string& path,
                                 const std::vector<std::pair<std::string, at::Tensor>>& entries,
                                 const std::map<std::string, std::string>& metadata) {
  const std::string temporary = OutputFile::temporary_for(path);
  try {
    write_tensor_file(temporary, entries, metadata);
    std::filesystem::rename(temporary, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    throw;
  }
}

}  // namespace loom::ckpt
