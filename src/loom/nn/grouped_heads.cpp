#include "loom/nn/grouped_heads.h"

#include "loom/core/error.h"

namespace loom::nn {

at::Tensor expand_kv_heads(const at::Tensor& kv, int64_t groups) {
  LOOM_CHECK(kv.dim() == 4 && groups >= 1, "expand_kv_heads: kv must be [B, Hkv, T, hd] and groups ({}) >= 1",
             groups);
  if (groups == 1) return kv;  // plain multi-head attention: nothing to share
  const int64_t b = kv.size(0), hkv = kv.size(1), t = kv.size(2), hd = kv.size(3);
  return kv.unsqueeze(2).expand({b, hkv, groups, t, hd}).reshape({b, hkv * groups, t, hd});
}

at::Tensor reduce_kv_heads(const at::Tensor& dkv, int64_t groups) {
  LOOM_CHECK(dkv.dim() == 4 && groups >= 1 && dkv.size(1) % groups == 0,
             "reduce_kv_heads: {} heads are not a whole number of groups of {}", dkv.dim() == 4 ? dkv.size(1) : 0,
             groups);
  if (groups == 1) return dkv;
  const int64_t b = dkv.size(0), hkv = dkv.size(1) / groups, t = dkv.size(2), hd = dkv.size(3);
  return dkv.reshape({b, hkv, groups, t, hd}).sum(2);
}

}  // namespace loom::nn
