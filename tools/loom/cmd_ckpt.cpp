#include <algorithm>
#include <cmath>
#include <iostream>

#include "commands.h"

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/inspect.h"
#include "loom/core/options.h"
#include "loom/hf/convert.h"
#include "loom/nn/precision.h"

namespace loom::cli {

namespace {

// `loom ckpt import --from hf DIR --out CKPT`: prints what it wrote and the [model] a run needs.
void import_folder(const std::string& from, const std::string& format, const std::string& out) {
  LOOM_CHECK_INPUT(format == "hf", "--from {}: loom imports Hugging Face model folders; hint: --from hf DIR", format);
  const hf::Imported done = hf::import_hf(from, out);
  if (!done.note.empty()) std::cerr << "loom: warning: " << done.note << "\n";
  Config config;
  config.model = done.hf.model;
  const std::vector<std::string_view> keys = models::ModelKinds::builtin().find(config.model.kind).model_keys();
  const std::string model = to_toml(config, [&keys](const std::string& key) {
    return key.starts_with("model.") && std::find(keys.begin(), keys.end(), key.substr(6)) != keys.end();
  });
  std::cout << fmt::format("wrote {} ({} tensors of a {} model, step 0); train from it with --init {} and this "
                           "model section:\n{}", done.checkpoint, done.tensors, hf::arch_name(done.hf.arch), out, model);
}

}  // namespace

// `loom ckpt inspect|verify|export|import`: one process reads a checkpoint of any layout.
Action add_ckpt(CLI::App& app) {
  auto* cmd = app.add_subcommand("ckpt", "inspect, verify, export or import a checkpoint");
  cmd->require_subcommand(1);
  struct Options {
    std::string dir, out, dtype = "float32", to = "safetensors", from, from_dir;
    double shard_mb = 5000;
    bool all = false;
  };
  auto o = std::make_shared<Options>();
  auto* inspect = cmd->add_subcommand("inspect", "step, layout, files and tensors of a checkpoint; checks every checksum");
  inspect->add_option("DIR", o->dir, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")->required();
  inspect->add_flag("--tensors", o->all, "list every tensor");
  auto* verify = cmd->add_subcommand("verify", "read every byte of a checkpoint and check it; exit 2 on damage");
  verify->add_option("DIR", o->dir, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")->required();
  auto* out = cmd->add_subcommand("export", "write the weights as one safetensors file of full tensors, or as a "
                                   "Hugging Face model folder");
  out->add_option("DIR", o->dir, "a checkpoint (step-NNNNNNN), or a checkpoint.dir: its latest")->required();
  out->add_option("--out", o->out, "the safetensors file (or, --to hf, the new model folder) to write")->required();
  out->add_option("--to", o->to, "safetensors (loom's names, the default) or hf (a Hugging Face model folder)");
  out->add_option("--dtype", o->dtype, "the tensors' type: float32 (the default), float64 or bfloat16; --to hf also "
                  "float16");
  out->add_option("--shard-mb", o->shard_mb, "--to hf: weight files of at most this many MB (5000 by default)");
  auto* in = cmd->add_subcommand("import", "a Hugging Face model folder (Llama, GPT-2) as a loom checkpoint of step "
                                 "0, for `loom train --init`");
  in->add_option("--from", o->from, "the folder's format: hf")->required();
  in->add_option("FOLDER", o->from_dir, "the model folder (config.json, model.safetensors or its index)")->required();
  in->add_option("--out", o->out, "the checkpoint.dir to write (new, or holding no checkpoint)")->required();
  return [inspect, verify, out, in, o](dist::Runtime&) {
    if (*in) return import_folder(o->from_dir, o->from, o->out);
    if (*out && o->to == "hf") {
      const at::ScalarType type = hf::weight_type(o->dtype, "--dtype");
      LOOM_CHECK_INPUT(std::isfinite(o->shard_mb) && o->shard_mb > 0 && o->shard_mb < 1e12,
                       "--shard-mb {} must be a number of MB above 0", o->shard_mb);
      const hf::Exported done = hf::export_hf(o->dir, o->out, type, static_cast<int64_t>(o->shard_mb * 1e6));
      std::cout << fmt::format("wrote {} tensors ({}), config.json{} to {}\n", done.tensors, o->dtype,
                               done.tokenizer.empty() ? "" : " and the tokenizer of " + done.tokenizer, o->out);
      return;
    }
    LOOM_CHECK_INPUT(o->to == "safetensors", "--to {}: loom exports to safetensors (loom's names) or hf", o->to);
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
