// The checkpoint format's pieces alone: boxes, the tensor file, the manifest, the directory; and
// the two files of a Hugging Face model folder that name its model and its shards (config.json,
// model.safetensors.index.json), as `loom ckpt import --from hf` reads them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "loom/ckpt/box.h"
#include "loom/ckpt/checkpoint_dir.h"
#include "loom/ckpt/manifest.h"
#include "loom/ckpt/tensor_file.h"
#include "loom/core/error.h"
#include "loom/hf/hf_config.h"
#include "loom/hf/hf_folder.h"
#include "unit/input_error.h"

namespace loom::ckpt {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("loom-unit-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(CheckpointBox, IntersectAndContain) {
  const Box a{{0, 4}, {8, 4}}, b{{6, 0}, {4, 6}};
  const std::optional<Box> c = intersect(a, b);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, (Box{{6, 4}, {2, 2}}));
  EXPECT_FALSE(intersect(a, Box{{0, 0}, {8, 4}}));  // touching edges share nothing
  EXPECT_TRUE(contains(a, *c));
  EXPECT_FALSE(contains(*c, a));
}

// Every run of a box's flattening becomes boxes that, in order, are exactly that run: checked
// element by element against a tensor holding each element's flat index, for every range.
TEST(CheckpointBox, RangesOfAFlatteningAreExactBoxes) {
  const Box box{{2, 0, 3}, {3, 4, 5}};  // a shard of a larger tensor
  const at::Tensor index = at::arange(box.numel(), at::kLong).view(box.size);
  for (int64_t begin = 0; begin <= box.numel(); ++begin)
    for (int64_t end = begin; end <= box.numel(); ++end) {
      std::vector<at::Tensor> parts;
      for (const Box& b : boxes_of_range(box, begin, end)) {
        ASSERT_TRUE(contains(box, b));
        parts.push_back(view_of(index, box, b).reshape({-1}));
      }
      const at::Tensor got = parts.empty() ? at::empty({0}, at::kLong) : at::cat(parts);
      ASSERT_TRUE(at::equal(got, at::arange(begin, end, at::kLong))) << begin << ".." << end;
    }
  EXPECT_EQ(boxes_of_range(box, 0, box.numel()).size(), 1u);  // the whole box is one
  EXPECT_EQ(boxes_of_range(box, 20, 40).size(), 1u);          // whole rows of the first dimension
  EXPECT_EQ(boxes_of_range(box, 1, 59).size(), 5u);            // head, rows, tail at two depths
}

TEST(CheckpointTensorFile, RoundTripsAndHasTheSafetensorsLayout) {
  const fs::path dir = fresh_dir("tensor-file");
  const std::string path = (dir / "a.safetensors").string();
  const at::Tensor x = at::randn({3, 5}, at::kDouble), y = at::arange(7, at::kFloat);
  const auto written = write_tensor_file(path, {{"x", x}, {"y", y}}, {{"step", "3"}});
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0].checksum, checksum(x.data_ptr(), x.nbytes()));
  TensorFileReader reader(path);
  EXPECT_TRUE(at::equal(reader.read("x"), x));
  EXPECT_TRUE(at::equal(reader.read("y"), y));
  EXPECT_EQ(reader.metadata().at("step"), "3");
  // The layout: 8-byte little-endian header length, a JSON header padded to 8, then the data.
  std::ifstream in(path, std::ios::binary);
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(fs::file_size(path), 8 + n + x.nbytes() + y.nbytes());
  EXPECT_THROW(reader.read("z"), InputError);
  fs::remove_all(dir);
}

// A header that lies (too long, entries past the end, a wrong byte count) is refused before any
// tensor is allocated.
TEST(CheckpointTensorFile, RefusesDamagedFiles) {
  const fs::path dir = fresh_dir("tensor-file-bad");
  const std::string path = (dir / "a.safetensors").string();
  write_tensor_file(path, {{"x", at::ones({64}, at::kFloat)}});
  fs::resize_file(path, fs::file_size(path) - 4);  // truncated data
  EXPECT_THROW(TensorFileReader{path}, InputError);
  const auto write_raw = [&](uint64_t declared, const std::string& header) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((declared >> (8 * i)) & 0xff));
    out << header;
  };
  write_raw(uint64_t{1} << 40, "{}");  // a header of a terabyte
  EXPECT_THROW(TensorFileReader{path}, InputError);
  write_raw(6, "{\"x\":");  // not JSON
  EXPECT_THROW(TensorFileReader{path}, InputError);
  const std::string wrong = R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})";
  write_raw(wrong.size(), wrong + std::string(12, '\0'));  // 12 bytes are not 4 floats
  EXPECT_THROW(TensorFileReader{path}, InputError);
  const std::string odd = R"({"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})";
  write_raw(odd.size(), odd + std::string(4, '\0'));
  EXPECT_THROW(TensorFileReader{path}, InputError);
  fs::remove_all(dir);
}

Manifest sample_manifest() {
  Manifest m{.loom_version = "test", .step = 7, .config = "[model]\n", .layout = {{"dp", 2}}, .state = {}};
  m.files.push_back({"rank-00000.safetensors", 100});
  m.tensors.push_back({.name = "w", .shape = {4, 6}, .dtype = "F32",
                       .boxes = {{.box = {{0, 0}, {2, 6}}, .file = "rank-00000.safetensors", .key = "w@0,0",
                                  .checksum = "00"}}});
  return m;
}

TEST(CheckpointManifest, RoundTripsAndRefusesWhatItCannotRead) {
  const Manifest m = sample_manifest();
  const Manifest back = parse_manifest(manifest_text(m), "m.json");
  EXPECT_EQ(back.step, 7);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].boxes[0].box, m.tensors[0].boxes[0].box);
  std::string text = manifest_text(m);
  const auto swap = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  EXPECT_THROW(parse_manifest(swap("\"version\": 1", "\"version\": 99"), "m.json"), InputError);
  EXPECT_THROW(parse_manifest(swap("loom-checkpoint", "something-else"), "m.json"), InputError);
  EXPECT_THROW(parse_manifest(text.substr(0, text.size() / 2), "m.json"), InputError);
  Manifest outside = m;
  outside.tensors[0].boxes[0].box.offset = {3, 0};  // rows 3..5 of a 4-row tensor
  EXPECT_THROW(parse_manifest(manifest_text(outside), "m.json"), InputError);
  Manifest escape = m;
  escape.tensors[0].boxes[0].file = "../elsewhere";
  EXPECT_THROW(parse_manifest(manifest_text(escape), "m.json"), InputError);
  try {
    parse_manifest(swap("\"version\": 1", "\"version\": 99"), "ck/manifest.json");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ck/manifest.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("version 99"), std::string::npos) << e.what();
  }
}

// NOTE [Atomic checkpoints]: `latest` is trusted only when it names a complete checkpoint; a
// partial directory never counts; commit keeps the newest `keep` and removes only loom's names.
TEST(CheckpointDir, LatestCommitAndKeep) {
  const fs::path dir = fresh_dir("ckpt-dir");
  const auto save = [&](int64_t step) {
    const std::string partial = begin_partial(dir.string(), step);
    std::ofstream(fs::path(partial) / "manifest.json") << "{}";
    commit_partial(dir.string(), step, 2);
  };
  EXPECT_FALSE(latest_checkpoint(dir.string()));
  std::ofstream(dir / "notes.txt") << "the user's";
  save(2);
  save(4);
  begin_partial(dir.string(), 6);  // a save that never finished
  EXPECT_EQ(latest_checkpoint(dir.string()), (dir / "step-0000004").string());
  save(8);
  EXPECT_FALSE(fs::exists(dir / "step-0000002"));
  EXPECT_TRUE(fs::exists(dir / "step-0000004"));
  EXPECT_FALSE(fs::exists(dir / ".step-0000006.partial"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  std::ofstream(dir / "latest", std::ios::trunc) << "step-0000099\n";  // stale: the highest complete
  EXPECT_EQ(latest_checkpoint(dir.string()), (dir / "step-0000008").string());
  EXPECT_THROW(check_writable_dir((dir / "notes.txt").string()), InputError);
  EXPECT_THROW(check_writable_dir((dir / "notes.txt" / "sub").string()), InputError);
  EXPECT_NO_THROW(check_writable_dir((dir / "new" / "deeper").string()));
  fs::remove_all(dir);
}

// NOTE [A checkpoint folder belongs to one run]: two runs' checkpoints in one directory (as
// folders written before run identities could hold): each run's commit prunes its own steps only,
// a fresh run and a resume are refused while another run's are there, and without a valid
// `latest` the reader refuses to pick between the runs.
TEST(CheckpointDir, EachRunPrunesAndPicksItsOwn) {
  const fs::path dir = fresh_dir("ckpt-runs");
  const auto save = [&](int64_t step, const std::string& run) {
    const std::string partial = begin_partial(dir.string(), step);
    std::ofstream(fs::path(partial) / "manifest.json") << R"({"state": {"run": {"id": ")" << run << R"("}}})";
    commit_partial(dir.string(), step, 2, run);
  };
  const auto present = [&](int64_t step) { return fs::exists(dir / step_name(step)); };
  EXPECT_NO_THROW(check_dir_for_run(dir.string(), std::nullopt));  // empty: a fresh run may start
  save(2, "a");
  save(4, "a");
  EXPECT_EQ(run_of((dir / step_name(4)).string()), "a");
  EXPECT_NO_THROW(check_dir_for_run(dir.string(), "a"));
  EXPECT_THROW(check_dir_for_run(dir.string(), std::nullopt), InputError);
  save(5, "b");
  save(7, "b");
  save(9, "b");  // b keeps 7 and 9; a's 2 and 4 are not b's to prune
  EXPECT_TRUE(present(2) && present(4) && !present(5) && present(7) && present(9));
  save(6, "a");  // a keeps 4 and 6
  EXPECT_TRUE(!present(2) && present(4) && present(6) && present(7) && present(9));
  EXPECT_THROW(check_dir_for_run(dir.string(), "a"), InputError);
  EXPECT_EQ(latest_checkpoint(dir.string()), (dir / "step-0000006").string());  // `latest` is trusted
  fs::remove(dir / "latest");
  try {
    latest_checkpoint(dir.string());
    ADD_FAILURE() << "picked a checkpoint among two runs";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("several runs"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Outputs may not be written where loom keeps checkpoints: inside this run's checkpoint.dir
// (existing or not), or inside any checkpoint or checkpoint folder.
TEST(CheckpointDir, OutputsStayOutsideCheckpoints) {
  const fs::path dir = fresh_dir("ckpt-outputs");
  const std::string ck = (dir / "ck").string(), missing = (dir / "new" / "ck").string();
  const std::string partial = begin_partial(ck, 4);
  std::ofstream(fs::path(partial) / "manifest.json") << "{}";
  commit_partial(ck, 4, 2);
  const auto refused = [&](const std::string& out, const std::string& own) {
    try {
      check_outside_checkpoints({{out, "--trace"}}, own);
    } catch (const InputError& e) {
      return std::string(e.what()).find("--trace '" + out + "' is in") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused(ck + "/latest", ""));
  EXPECT_TRUE(refused(ck + "/step-0000004/rank-00000.safetensors", ""));
  EXPECT_TRUE(refused(ck + "/t.json", ck));
  EXPECT_TRUE(refused(missing + "/t.json", missing));  // a checkpoint.dir not made yet
  EXPECT_TRUE(refused(missing, missing));              // the output would take its name
  EXPECT_NO_THROW(check_outside_checkpoints({{(dir / "t.json").string(), "--trace"}}, ck));
  EXPECT_NO_THROW(check_outside_checkpoints({{(dir / "ck-t.json").string(), "--trace"}}, ck));
  fs::remove_all(dir);
}

// A Llama's config.json as export writes it, for the import tests to break one key at a time.
nlohmann::json tiny_llama_config() {
  ModelConfig m;
  m.kind = "llama";
  m.vocab = 32, m.d_model = 64, m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 2, m.ffn_multiple_of = 16;
  return hf::write_hf_config(m, "float32", 128);
}

// A malformed config.json is refused naming the file and the key: a size written as text, a
// required key missing, a nested value of the wrong type, and a file cut short.
TEST(HfConfig, RefusesMalformedConfigNamingTheFileAndTheKey) {
  using ::testing::HasSubstr;
  using loom::testing::input_error;
  const nlohmann::json good = tiny_llama_config();
  const hf::HfModel base = hf::read_hf_config(good, "llama/config.json");  // each case breaks one key of it
  ASSERT_TRUE(base.arch == hf::Arch::Llama && base.model.d_model == 64 && base.model.ffn_multiple_of == 16);
  nlohmann::json j = good;
  j["hidden_size"] = "64";
  EXPECT_THAT(input_error([&] { hf::read_hf_config(j, "llama/config.json"); }),
              HasSubstr("llama/config.json: \"hidden_size\" is \"64\", not a positive integer"));
  j = good;
  j["hidden_size"] = int64_t{1} << 62;  // 2 x 4 x it would overflow the SwiGLU width's arithmetic
  j["num_attention_heads"] = 1, j["num_key_value_heads"] = 1;
  j.erase("head_dim");
  EXPECT_THAT(input_error([&] { hf::read_hf_config(j, "llama/config.json"); }),
              HasSubstr("llama/config.json: \"hidden_size\" 4611686018427387904 or \"intermediate_size\""));
  j = good;
  j.erase("num_hidden_layers");
  EXPECT_THAT(input_error([&] { hf::read_hf_config(j, "llama/config.json"); }),
              HasSubstr("llama/config.json: the key \"num_hidden_layers\" is missing"));
  j = good;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", "big"}};
  EXPECT_THAT(input_error([&] { hf::read_hf_config(j, "llama/config.json"); }),
              HasSubstr("llama/config.json: rope_parameters.rope_theta is \"big\", not a number"));
  const fs::path dir = fresh_dir("hf-config");
  std::ofstream(dir / "config.json") << good.dump(2).substr(0, 40);
  EXPECT_THAT(input_error([&] { hf::HfFolder{dir.string()}; }),
              HasSubstr((dir / "config.json").string() + ": not JSON"));
  fs::remove_all(dir);
}

// A malformed model.safetensors.index.json is refused naming it: cut short, a weight_map that is
// not an object, a file name that is not text, a tensor its shard lacks, a shard that is missing.
TEST(HfFolder, RefusesAMalformedIndexNamingIt) {
  using ::testing::HasSubstr;
  using loom::testing::input_error;
  const fs::path dir = fresh_dir("hf-index");
  std::ofstream(dir / "config.json") << tiny_llama_config().dump(2);
  write_tensor_file((dir / "model-00001-of-00001.safetensors").string(),
                    {{"lm_head.weight", at::zeros({2}, at::kFloat)}});
  const std::string index = (dir / "model.safetensors.index.json").string();
  const auto refusal = [&](const std::string& text) {
    std::ofstream(index, std::ios::trunc) << text;
    return input_error([&] { hf::HfFolder{dir.string()}; });
  };
  EXPECT_THAT(refusal(R"({"weight_map": {"lm_head.weight": "model-00001-of-)"), HasSubstr(index + ": not JSON"));
  EXPECT_THAT(refusal(R"({"weight_map": ["lm_head.weight"]})"), HasSubstr(index + ": no \"weight_map\" object"));
  EXPECT_THAT(refusal(R"({"weight_map": {"lm_head.weight": 1}})"),
              HasSubstr(index + ": \"lm_head.weight\" maps to 1, not a file name"));
  EXPECT_THAT(refusal(R"({"weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors"}})"),
              HasSubstr(index + ": names tensor model.norm.weight in model-00001-of-00001.safetensors, which does "
                                "not hold it"));
  EXPECT_THAT(refusal(R"({"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}})"),
              HasSubstr(dir.string() + ": the index names model-00002-of-00002.safetensors, which is missing"));
  // A name with a path in it is refused before any file is opened (a fuzz finding: "../x" was opened).
  EXPECT_THAT(refusal(R"({"weight_map": {"lm_head.weight": "../model-00001-of-00001.safetensors"}})"),
              HasSubstr(index + ": \"lm_head.weight\" maps to \"../model-00001-of-00001.safetensors\", not the name of a "
                                "file in the folder"));
  EXPECT_THAT(refusal(R"({"weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors\u0000x"}})"),
              HasSubstr("not the name of a file in the folder"));
  std::ofstream(index, std::ios::trunc) << R"({"weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}})";
  EXPECT_TRUE(hf::HfFolder(dir.string()).has("lm_head.weight"));  // the same folder, its index fixed
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::ckpt
