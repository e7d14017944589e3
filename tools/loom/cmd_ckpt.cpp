#include <iostream>

#include "commands.h"

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/inspect.h"
#include "loom/core/options.h"
#include "loom/nn/precision.h"

namespace loom::cli {

// `loom ckpt inspect|verify|export`: one process reads a checkpoint of any layout.
Action add_ckpt(CLI::App& app) {
  auto* cmd = app.add_subcommand("ckpt", "inspect, verify or export a checkpoint");
  cmd->require_subcommand(1);
  struct Options {
    std::string dir, out, dtype = "float32";
    bool all = false;
  };
  auto o = std::make_shared<Options>();
  auto* inspect = cmd->add_subcommand("inspect", "step, layout, files and tensors of a checkpoint; checks every checksum");
  inspect->add_option("DIR", o->dir, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")->required();
  inspect->add_flag("--tensors", o->all, "list every tensor");
  auto* verify = cmd->add_subcommand("verify", "read every byte of a checkpoint and check it; exit 2 on damage");
  verify->add_option("DIR", o->dir, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")->required();
  auto* out = cmd->add_subcommand("export", "write the weights as one safetensors file of full tensors");
  out->add_option("DIR", o->dir, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")->required();
  out->add_option("--out", o->out, "the safetensors file to write")->required();
  out->add_option("--dtype", o->dtype, "the tensors' type: float32 (the default), float64 or bfloat16");
  return [inspect, verify, out, o](dist::Runtime&) {
    const DType dtype = option_from<DType>("--dtype", o->dtype);
    o->dir = ckpt::checkpoint_of(o->dir);
    if (*inspect) std::cout << ckpt::describe(ckpt::verify(o->dir), o->all);
    if (*verify) {
      const ckpt::CheckpointSummary s = ckpt::verify(o->dir);
      std::cout << fmt::format("checkpoint {} (step {}): {} tensors, {} files, {:.2f} MB; every checksum ok\n", o->dir,
                               s.manifest.step, s.tensors.size(), s.manifest.files.size(),
                               static_cast<double>(s.bytes) / 1e6);
    }
    if (*out) {
      const int64_t n = ckpt::export_weights(o->dir, o->out, nn::activation_type(dtype));
      std::cout << fmt::format("wrote {} tensors ({}, full shapes, loom's names) to {}\n", n, o->dtype, o->out);
    }
  };
}

}  // namespace loom::cli
