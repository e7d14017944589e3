#pragma once
// GPT (pre-LayerNorm, learned positions, GELU-tanh MLP, untied head) as the chain
//   embedding, [attention sub-block, MLP sub-block] x n_layers, final_norm, head_loss.
#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/models/registry.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/parallel/tp_region.h"

namespace loom::models {

// Layers only; call Model::initialise to allocate and fill the parameters. Tensor parallelism
// over `tp` (a communicator of one rank for a serial model): the attention and MLP sub-blocks
// split their heads and hidden units, the embedding and the head their (padded) vocabulary;
// norms and the position table are replicated. `tp.overlap` > 1 cuts each micro-batch into that
// many chunks in the sub-blocks to overlap their collectives (NOTE [Sub-pipelined TP]);
// `tp.sequence` shards the residual stream and the norms along seq (NOTE [Tensor-parallel
// regions]): the layers between the embedding and the head see seq/tp tokens per rank.
// `sp`: sequence parallelism over segments (NOTE [Sequence parallelism]): every layer sees one
// segment of each sequence.
// `ep`: the expert group (NOTE [Expert parallelism]); null: every expert on this rank.
Model build_gpt(const ModelConfig& config, dist::Communicator& tp, parallel::TpOptions options = {},
                parallel::SpOptions sp = {}, dist::Communicator* ep = nullptr);

// model.kind = "gpt" (registry.h).
const ModelKind& gpt_kind();

}  // namespace loom::models
