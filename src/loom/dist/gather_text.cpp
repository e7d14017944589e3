#include "loom/dist/gather_text.h"

#include <cstring>

namespace loom::dist {

std::vector<std::string> all_gather_text(Communicator& world, const std::string& mine) {
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), opts);
  at::Tensor lengths = at::empty({world.size()}, opts);
  world.all_gather(length, lengths);
  const int64_t words = (lengths.max().item<int64_t>() + 7) / 8;
  std::vector<std::string> out(static_cast<size_t>(world.size()));
  if (words == 0) return out;  // every rank sees the same lengths: all skip the second gather
  at::Tensor text = at::zeros({words}, opts);
  std::memcpy(text.data_ptr(), mine.data(), mine.size());
  at::Tensor texts = at::empty({world.size() * words}, opts);
  world.all_gather(text, texts);
  for (int r = 0; r < world.size(); ++r) {
    const char* begin = reinterpret_cast<const char*>(texts.data_ptr<int64_t>() + r * words);
    out[static_cast<size_t>(r)].assign(begin, static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  return out;
}

}  // namespace loom::dist
