#pragma once
// Where a piece of a tensor sits in the whole: a rectangular block of the tensor's full
// (unsharded) coordinates. A checkpoint stores every tensor as such blocks, whatever layout held
// them, and a rank of any other layout loads its own blocks by intersection (NOTE [Checkpoints]).
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::ckpt {

struct Box {
  std::vector<int64_t> offset;  // first index per dimension
  std::vector<int64_t> size;    // extent per dimension
  int64_t numel() const;
  bool operator==(const Box&) const = default;
  std::string text() const;  // "[0:128, 64:96]"
};

// The whole of a tensor of `shape`.
Box whole(const std::vector<int64_t>& shape);
// The common part of two boxes of one tensor, if any.
std::optional<Box> intersect(const Box& a, const Box& b);
// True when `inner` lies inside `outer`.
bool contains(const Box& outer, const Box& inner);
// Elements [begin, end) of the row-major flattening of `box` (a ZeRO shard's piece of a parameter)
// as the fewest boxes that each are one contiguous run of that flattening, in order.
std::vector<Box> boxes_of_range(const Box& box, int64_t begin, int64_t end);
// `data` holds `box` (shaped as box.size): the view of it that holds `part` (inside box).
at::Tensor view_of(const at::Tensor& data, const Box& box, const Box& part);

}  // namespace loom::ckpt
