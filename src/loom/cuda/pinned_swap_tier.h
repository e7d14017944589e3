#pragma once
// NOTE [Swap tier] on a GPU: the saved activations leave the GPU for pinned host blocks (page-locked,
// so the copy engine moves them at the link's speed while the GPU computes), kept for reuse by a
// memory::BlockPool; the copies run on a stream of the tier's own. A copy first waits, on that
// stream, for an event recorded on the compute stream: a tensor going out is read only after the
// kernels that wrote it, and a block coming back (just taken from the caching allocator, which may
// hand out memory freed by kernels still queued on the compute stream) is written only after them.
// copy() returns when the bytes have arrived (the Swapper's contract), so the compute stream reads
// a tensor brought back only after it is whole. The host tier's figures are the pool's.
#include <memory>

#include "loom/memory/swap.h"

namespace loom::cuda {

// The tier of a rank computing on `gpu`. Throws loom::Error where this build has no CUDA.
std::unique_ptr<memory::SwapTier> make_pinned_swap_tier(int gpu);

}  // namespace loom::cuda
