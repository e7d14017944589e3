#include "loom/core/mesh_placement.h"

#include <fmt/format.h>

#include <algorithm>

namespace loom {

std::string Placement::text() const {
  switch (kind) {
    case PlacementKind::Replicate: return "replicate";
    case PlacementKind::Shard: return fmt::format("shard({})", dim);
    case PlacementKind::Partial: return "partial";
  }
  return "?";
}

int64_t real_length(int64_t size, int n, int rank) {
  const int64_t length = piece_length(size, n);
  return std::clamp<int64_t>(size - length * rank, 0, length);
}

}  // namespace loom
