#pragma once
// loom's public C++ API, in one header (docs/cpp-api.md says what each part promises):
//   layers        nn::Layer with its split backward (forward, backward_input, backward_weight),
//                 nn::Param (full name, full shape, this rank's shard), nn::Cost, and the
//                 mixed-precision helpers a layer's products use (nn::compute_value, and
//                 nn::matmul / nn::add_product on the rank's bf16 path: NOTE [bf16 products])
//   gradients     nn::check_gradients: a layer against libtorch autograd (NOTE [Gradient check])
//   building      loom's blocks a chain may reuse (embedding, final norm, head and loss), the
//                 tensor- and sequence-parallel groups a layer is given (models::Parallelism)
//   model kinds   models::ModelKind, models::DecoderKind (a token language model's data and
//                 figures) and models::ModelKinds, the registry a run is given
//   config        loom::Config, read from TOML with --set style overrides
//   training      loom::Training (what `loom train` runs, in any layout), its metrics callback,
//                 and loom::run_program, a program's main that ends every rank on any error
//   equivalence   train::compare_with_serial: a layout against its serial run (NOTE [Layout equivalence])
#include "loom/api/program.h"
#include "loom/api/training.h"
#include "loom/blocks/embedding.h"
#include "loom/blocks/final_norm.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/mpi/runtime.h"
#include "loom/models/decoder_kind.h"
#include "loom/models/model.h"
#include "loom/models/registry.h"
#include "loom/nn/gradient_check.h"
#include "loom/nn/layer.h"
#include "loom/nn/param.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/train/equivalence.h"
#include "loom/version.h"
