#include "loom/ckpt/box.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "loom/core/error.h"

namespace loom::ckpt {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t s : size) n *= s;
  return n;
}

std::string Box::text() const {
  std::vector<std::string> dims;
  for (size_t d = 0; d < size.size(); ++d) dims.push_back(fmt::format("{}:{}", offset[d], offset[d] + size[d]));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

Box whole(const std::vector<int64_t>& shape) { return {std::vector<int64_t>(shape.size(), 0), shape}; }

std::optional<Box> intersect(const Box& a, const Box& b) {
  LOOM_CHECK(a.size.size() == b.size.size(), "[ckpt] boxes of {} and {} dimensions", a.size.size(), b.size.size());
  Box out{a.offset, a.size};
  for (size_t d = 0; d < a.size.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.size[d], b.offset[d] + b.size[d]);
    if (lo >= hi) return std::nullopt;
    out.offset[d] = lo;
    out.size[d] = hi - lo;
  }
  return out;
}

bool contains(const Box& outer, const Box& inner) {
  const std::optional<Box> common = intersect(outer, inner);
  return common && *common == inner;
}

namespace {

// Appends the boxes of elements [begin, end) of `box`'s flattening, from dimension `dim` on
// (the dimensions before it already fixed to one index each).
void append_range(Box box, size_t dim, int64_t begin, int64_t end, std::vector<Box>& out) {
  if (begin >= end) return;
  int64_t inner = 1;  // elements per index of `dim`
  for (size_t d = dim + 1; d < box.size.size(); ++d) inner *= box.size[d];
  const int64_t first = begin / inner, last = (end - 1) / inner;  // indices of `dim` touched
  const auto part = [&](int64_t index, int64_t count) {
    Box b = box;
    b.offset[dim] += index;
    b.size[dim] = count;
    return b;
  };
  if (first == last && (begin % inner != 0 || end % inner != 0)) {  // inside one index: one dimension deeper
    append_range(part(first, 1), dim + 1, begin - first * inner, end - first * inner, out);
    return;
  }
  const int64_t whole_begin = (begin + inner - 1) / inner, whole_end = end / inner;  // whole indices
  if (begin % inner != 0) append_range(box, dim, begin, whole_begin * inner, out);
  if (whole_end > whole_begin) out.push_back(part(whole_begin, whole_end - whole_begin));
  if (end % inner != 0) append_range(box, dim, whole_end * inner, end, out);
}

}  // namespace

std::vector<Box> boxes_of_range(const Box& box, int64_t begin, int64_t end) {
  LOOM_CHECK(0 <= begin && begin <= end && end <= box.numel(), "[ckpt] range [{}, {}) of a box of {} elements",
             begin, end, box.numel());
  std::vector<Box> out;
  if (box.size.empty()) {  // a scalar
    if (begin < end) out.push_back(box);
    return out;
  }
  append_range(box, 0, begin, end, out);
  return out;
}

at::Tensor view_of(const at::Tensor& data, const Box& box, const Box& part) {
  LOOM_CHECK(contains(box, part), "[ckpt] {} is not inside {}", part.text(), box.text());
  at::Tensor view = data;
  for (size_t d = 0; d < box.size.size(); ++d)
    view = view.narrow(static_cast<int64_t>(d), part.offset[d] - box.offset[d], part.size[d]);
  return view;
}

}  // namespace loom::ckpt
