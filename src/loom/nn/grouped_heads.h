#pragma once
// Grouped-query attention: H query heads share Hkv = H / groups key and value heads. Query head
// h uses kv head h / groups, so each kv head serves `groups` consecutive query heads (the order
// Llama checkpoints assume). The attention kernel runs on expanded k and v; the expansion's
// backward sums the gradients of each group back into its kv head.
#include <ATen/ATen.h>

namespace loom::nn {

// [B, Hkv, T, hd] -> [B, Hkv * groups, T, hd]: kv head j becomes heads j*groups .. (j+1)*groups-1.
at::Tensor expand_kv_heads(const at::Tensor& kv, int64_t groups);

// [B, Hkv * groups, T, hd] -> [B, Hkv, T, hd]: the sum over each group (expand_kv_heads' backward).
at::Tensor reduce_kv_heads(const at::Tensor& dkv, int64_t groups);

}  // namespace loom::nn
