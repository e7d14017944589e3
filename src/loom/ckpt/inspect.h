#pragma once
// `loom ckpt`: a checkpoint read whole, by one process, without a model: its contents, a check of
// every byte, and its weights as one file of full tensors for other tools.
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/ckpt/checkpointer.h"
#include "loom/ckpt/manifest.h"

namespace loom::ckpt {

struct TensorSummary {
  std::string name, dtype;
  std::vector<int64_t> shape;
  size_t boxes = 0;
  int64_t bytes = 0;
};

struct CheckpointSummary {
  std::string dir;
  Manifest manifest;
  std::vector<TensorSummary> tensors;
  int64_t bytes = 0;  // of every stored box
};

// Reads the manifest and every stored box, checking each box's checksum, shape and dtype, and
// that each tensor's boxes cover it whole: InputError naming the file and tensor otherwise.
CheckpointSummary verify(const std::string& dir);
// A few lines: step, versions, the layout it was written in, the files, the tensors (each name,
// shape, dtype and its number of boxes with `all_tensors`, else the count per kind).
std::string describe(const CheckpointSummary& summary, bool all_tensors);
// Every stored box of tensor `t` of the checkpoint in `dir` (files opened once in `files`), verified
// and assembled into the full tensor of its stored dtype; adds the bytes read to `*bytes`.
// InputError naming the checkpoint when the boxes do not cover the tensor.
at::Tensor assemble(const std::string& dir, const StoredTensor& t, TensorFiles& files, int64_t* bytes);
// Writes the model's weights (every tensor but the optimizer's moments) as full tensors of `type`
// (float32 by default) under loom's parameter names into one safetensors file `out` (written beside
// it and renamed into place; never over an input). Returns the tensors written.
int64_t export_weights(const std::string& dir, const std::string& out, at::ScalarType type = at::kFloat);

}  // namespace loom::ckpt
