#include "loom/hf/convert.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <set>

#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/checkpointer.h"
#include "loom/ckpt/inspect.h"
#include "loom/core/error.h"
#include "loom/data/byte_bpe.h"
#include "loom/data/token_sidecar.h"
#include "loom/data/tokenizer.h"
#include "loom/dist/null_communicator.h"
#include "loom/hf/hf_folder.h"
#include "loom/hf/hf_tensors.h"

namespace loom::hf {
namespace fs = std::filesystem;
namespace {

constexpr std::array<std::pair<const char*, at::ScalarType>, 4> kWeightTypes{
    {{"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}, {"float64", at::kDouble}}};

// The folder's name for `name`: itself, or, in a GPT-2 saved without its head, the name without
// "transformer.".
std::optional<std::string> stored_name(const HfFolder& folder, const std::string& name) {
  if (folder.has(name)) return name;
  if (name.starts_with("transformer.") && folder.has(name.substr(12))) return name.substr(12);
  return std::nullopt;
}

// What a folder may hold besides the model's tensors: GPT-2's causal-mask buffers (no weights),
// and a tied head's copy of the token table, checked equal.
void check_left_over(const HfFolder& folder, const HfModel& hf, const std::set<std::string>& used) {
  for (const auto& [name, reader] : folder.tensors()) {
    if (used.contains(name)) continue;
    if (hf.arch == Arch::Gpt2 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))) continue;
    if (name == "lm_head.weight" && hf.model.tie_embeddings) {
      const std::string table = hf.arch == Arch::Llama ? "model.embed_tokens.weight" : *stored_name(folder, "transformer.wte.weight");
      LOOM_CHECK_INPUT(at::equal(folder.read(name).to(at::kDouble), folder.read(table).to(at::kDouble)),
                       "{}: lm_head.weight differs from {}, and "
                       "config.json says \"tie_word_embeddings\": true; hint: set it to false for a separate head",
                       folder.file_of(name), table);
      continue;
    }
    LOOM_CHECK_INPUT(false, "{}: tensor {} is not part of a {} model as config.json describes it ({} layers{}); hint: "
                     "check \"num_hidden_layers\" / \"n_layer\" and \"tie_word_embeddings\"", folder.file_of(name), name,
                     arch_name(hf.arch), hf.model.n_layers, hf.model.tie_embeddings ? ", tied head" : "");
  }
}

// Each map's stored tensors, checked by name, shape and type against the loom parameter's shape.
std::vector<std::vector<std::string>> find_tensors(const HfFolder& folder, const HfModel& hf,
                                                   const std::vector<TensorMap>& maps,
                                                   const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::vector<std::vector<std::string>> found;
  std::set<std::string> used;
  for (const TensorMap& map : maps) {
    const std::vector<std::vector<int64_t>> want = hf_shapes(map, shapes.at(map.loom));
    found.emplace_back();
    for (size_t i = 0; i < map.hf.size(); ++i) {
      const std::optional<std::string> name = stored_name(folder, map.hf[i]);
      LOOM_CHECK_INPUT(name, "{}: tensor {} is missing, and a {} model as config.json describes it has it",
                       folder.dir(), map.hf[i], arch_name(hf.arch));
      const ckpt::TensorFileReader::Entry& e = folder.entry(*name);
      LOOM_CHECK_INPUT(e.shape == want[i], "{}: tensor {} is [{}], and config.json's sizes make it [{}]",
                       folder.file_of(*name), *name, fmt::join(e.shape, ", "), fmt::join(want[i], ", "));
      LOOM_CHECK_INPUT(e.dtype == at::kFloat || e.dtype == at::kBFloat16 || e.dtype == at::kHalf || e.dtype == at::kDouble,
                       "{}: tensor {} is {}; loom imports float32, bfloat16, float16 and float64 weights",
                       folder.file_of(*name), *name, c10::toString(e.dtype));
      used.insert(*name);
      found.back().push_back(*name);
    }
  }
  check_left_over(folder, hf, used);
  return found;
}

// The folder's tokenizer, checked against the model's vocabulary; "" when it has none, or one loom
// cannot read (`note` then says why: the weights are imported all the same).
std::string check_tokenizer(const std::string& from, const HfModel& hf, std::string& note) {
  if (!data::has_tokenizer_files(from)) return "";
  std::unique_ptr<data::Tokenizer> tokenizer;
  try {
    tokenizer = data::load_tokenizer(from);
  } catch (const Error& e) {  // InputError, or no SentencePiece in this build
    note = fmt::format("the folder's tokenizer is not recorded, as loom cannot read it: {}", e.what());
    return "";
  }
  LOOM_CHECK_INPUT(tokenizer->vocab() <= hf.model.vocab, "{}: its tokenizer ({}) has {} pieces, more than "
                   "config.json's vocabulary of {}: ids past the embedding table", from, tokenizer->kind(),
                   tokenizer->vocab(), hf.model.vocab);
  return fs::absolute(from).string();
}

// What `loom ckpt import` recorded of the folder a checkpoint's weights came from: in its own
// state, or in that of the checkpoint its run started from (checkpoint.init); {} when neither says.
nlohmann::json imported_from(const ckpt::Manifest& manifest, const Config& config) {
  if (manifest.state.contains("import")) return manifest.state.at("import");
  if (config.checkpoint.init.empty()) return nlohmann::json::object();
  try {
    const ckpt::Manifest init = ckpt::read_manifest(ckpt::checkpoint_of(config.checkpoint.init));
    return init.state.value("import", nlohmann::json::object());
  } catch (const InputError&) {  // moved or removed since: nothing to add
    return nlohmann::json::object();
  }
}

// The tokenizer model's bytes for an export: the run's token file's, else the imported folder's;
// with where it came from ("" and "" when loom has none).
std::pair<std::string, std::string> tokenizer_for(const Config& config, const nlohmann::json& imported) {
  const std::string& source = config.data.source;
  if (source.starts_with("tokens:")) {
    const std::string path = source.substr(7);
    const std::optional<data::TokenSidecar> sidecar = data::read_sidecar(path);
    if (sidecar && sidecar->tokenizer != "byte") return {data::read_tokenizer_model(path, *sidecar), path};
  }
  const std::string folder = imported.value("tokenizer", "");
  if (!folder.empty() && data::has_tokenizer_files(folder)) return {data::read_tokenizer_file(folder, "the imported folder's tokenizer"), folder};
  return {"", ""};
}

ckpt::CheckpointMeta import_meta(const HfModel& hf, const HfFolder& folder, const std::string& tokenizer) {
  Config config;
  config.model = hf.model;
  ckpt::CheckpointMeta meta{.step = 0, .config = to_toml(config)};
  meta.layout = {{"ranks", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"sp", 1}, {"zero", 0}};
  meta.state = {{"run", {{"id", ckpt::new_run_id()}}},
                {"import", {{"from", "hf"}, {"folder", fs::absolute(folder.dir()).string()},
                            {"architecture", arch_name(hf.arch)}, {"torch_dtype", hf.torch_dtype},
                            {"tokenizer", tokenizer}, {"config", folder.config()}}}};
  return meta;
}

}  // namespace

Imported import_hf(const std::string& from, const std::string& out, const models::ModelKinds& kinds) {
  const HfFolder folder(from);
  Imported result{.hf = read_hf_config(folder.config(), folder.config_path())};
  HfModel& hf = result.hf;
  const std::string tokenizer = check_tokenizer(from, hf, result.note);
  ckpt::check_writable_dir(out);
  ckpt::check_dir_for_run(out, std::nullopt);
  const std::vector<TensorMap> maps = tensor_maps(hf.arch, hf.model);
  bool all_double = true;
  for (const auto& [name, reader] : folder.tensors()) all_double &= reader->entries().at(name).dtype == at::kDouble;
  if (all_double) hf.model.dtype = DType::Float64;
  Config config;
  config.model = hf.model;
  models::validate_config(config, kinds);  // loom's own limits on the sizes
  dist::NullCommunicator tp("tp"), world;
  models::Model model = kinds.find(hf.model.kind).build(hf.model, {.tp = tp});
  std::map<std::string, std::vector<int64_t>> shapes;
  for (nn::Param* p : model.params()) shapes[p->name] = p->full_shape;
  LOOM_CHECK(shapes.size() == maps.size(), "import: {} parameters but {} mapped", shapes.size(), maps.size());
  const std::vector<std::vector<std::string>> names = find_tensors(folder, hf, maps, shapes);
  std::vector<ckpt::TensorPiece> pieces;
  for (size_t i = 0; i < maps.size(); ++i) {
    std::vector<at::Tensor> parts;
    for (const std::string& name : names[i]) parts.push_back(folder.read(name).to(all_double ? at::kDouble : at::kFloat));
    pieces.push_back(ckpt::whole_piece(maps[i].loom, to_loom(maps[i], parts).contiguous()));
  }
  ckpt::Checkpointer writer({.dir = out, .keep = 1}, world);
  writer.save(import_meta(hf, folder, tokenizer), pieces);
  writer.finish();
  result.checkpoint = writer.last_committed();
  result.tensors = static_cast<int64_t>(pieces.size());
  return result;
}

Exported export_hf(const std::string& checkpoint, const std::string& out, at::ScalarType type, int64_t shard_bytes) {
  const std::string dir = ckpt::checkpoint_of(checkpoint);
  const ckpt::Manifest manifest = ckpt::read_manifest(dir);
  ckpt::check_files(dir, manifest);
  const Config config = parse_config(manifest.config, dir + "/manifest.json");
  const Arch arch = arch_of(config.model);
  ckpt::check_outside_checkpoints({{out, "--out"}}, dir);
  check_new_folder(out);
  ckpt::TensorFiles files;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const TensorMap& map : tensor_maps(arch, config.model)) {
    const ckpt::StoredTensor* stored = manifest.find(map.loom);
    LOOM_CHECK_INPUT(stored, "checkpoint {} has no tensor {}, which its model.kind = \"{}\" has; hint: loom ckpt "
                     "inspect {} --tensors lists what it holds", dir, map.loom, config.model.kind, dir);
    int64_t bytes = 0;
    const std::vector<at::Tensor> parts = to_hf(map, ckpt::assemble(dir, *stored, files, &bytes));
    for (size_t i = 0; i < parts.size(); ++i) tensors.emplace_back(map.hf[i], parts[i].to(type).contiguous());
  }
  const nlohmann::json imported = imported_from(manifest, config);
  const auto [model, from] = tokenizer_for(config, imported);
  std::vector<std::pair<std::string, std::string>> extra;
  if (!model.empty()) extra.emplace_back(data::is_tokenizer_json(model) ? "tokenizer.json" : "tokenizer.model", model);
  // A Llama's context: the imported model's, which a fine-tune at a shorter seq_len keeps.
  const nlohmann::json original = imported.value("config", nlohmann::json::object());
  const int64_t context = std::max(config.model.seq_len, original.value("max_position_embeddings", int64_t{0}));
  write_hf_folder(out, write_hf_config(config.model, weight_type_name(type), context), tensors, shard_bytes, extra);
  return {static_cast<int64_t>(tensors.size()), from};
}

at::ScalarType weight_type(const std::string& name, const std::string& option) {
  for (const auto& [text, type] : kWeightTypes)
    if (name == text) return type;
  LOOM_CHECK_INPUT(false, "{} = \"{}\" is not a weight type; hint: float32, bfloat16, float16 or float64", option, name);
  return at::kFloat;
}

std::string weight_type_name(at::ScalarType type) {
  for (const auto& [text, t] : kWeightTypes)
    if (t == type) return text;
  LOOM_CHECK(false, "weight_type_name: {}", c10::toString(type));
  return "";
}

}  // namespace loom::hf
