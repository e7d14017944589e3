// Config parsing, overrides, printing and validation: every bad input is an InputError whose
// message names the key, the value and what would be right.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <fstream>
#include <limits>

#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/models/registry.h"
#include "unit/input_error.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using loom::testing::input_error;

TEST(Config, ParsesSectionsAndKeepsDefaultsForAbsentKeys) {
  const Config c = parse_config(R"(
[model]
d_model = 128
n_heads = 8
dtype = "float64"
[train]
lr = 3e-4
clip = 2        # an integer is accepted where a float is expected
[parallel]
pp_cuts = [3, 7]
)",
                                "test.toml");
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.n_heads, 8);
  EXPECT_EQ(c.model.dtype, DType::Float64);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.train.clip, 2.0);
  EXPECT_EQ(c.parallel.pp_cuts, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(c.model.vocab, Config{}.model.vocab);
}

TEST(Config, UnknownKeyNamesTheClosestKnownOne) {
  const std::string msg = input_error([] { parse_config("[model]\nd_modle = 3\n", "x.toml"); });
  EXPECT_THAT(msg, HasSubstr("unknown config key 'model.d_modle'"));
  EXPECT_THAT(msg, HasSubstr("did you mean 'model.d_model'"));
  EXPECT_THAT(input_error([] { parse_config("steps = 3\n", "x.toml"); }), HasSubstr("outside any section"));
}

TEST(Config, UnknownSectionListsTheSectionsOfTheKeyTable) {
  const std::string sections = "the sections are [model], [parallel], [memory], [train], [data]";
  const std::string foo = input_error([] { parse_config("[foo]\nbar = 1\n", "x.toml"); });
  EXPECT_THAT(foo, HasSubstr("x.toml: unknown section [foo]; " + sections));
  EXPECT_THAT(foo, Not(HasSubstr("did you mean")));
  EXPECT_THAT(input_error([] { parse_config("[trian]\nsteps = 3\n", "x.toml"); }),
              HasSubstr("unknown section [trian]; did you mean [train]? " + sections));
  Config c;
  EXPECT_THAT(input_error([&] { apply_override(c, "foo.bar=1"); }), HasSubstr("unknown section [foo]; " + sections));
  EXPECT_THAT(input_error([&] { apply_override(c, "modle.d_model=8"); }), HasSubstr("did you mean [model]?"));
  // The list comes from the key table: every section of config_keys(), each once, in order.
  std::vector<std::string> from_keys;
  for (const auto& key : config_keys()) {
    const std::string section = key.substr(0, key.find('.'));
    if (std::find(from_keys.begin(), from_keys.end(), section) == from_keys.end()) from_keys.push_back(section);
  }
  const std::vector<std::string_view> sections_list = config_sections();
  EXPECT_EQ(from_keys, std::vector<std::string>(sections_list.begin(), sections_list.end()));
}

TEST(Config, WrongTypesAreRefusedWithTheValue) {
  EXPECT_THAT(input_error([] { parse_config("[model]\nd_model = \"big\"\n", "x.toml"); }),
              HasSubstr("model.d_model must be an integer, got a string"));
  EXPECT_THAT(input_error([] { parse_config("[train]\nlr = true\n", "x.toml"); }),
              HasSubstr("train.lr must be a number"));
  EXPECT_THAT(input_error([] { parse_config("[parallel]\npp_cuts = [1, \"a\"]\n", "x.toml"); }),
              HasSubstr("array of integers"));
  EXPECT_THAT(input_error([] { parse_config("[model\n", "x.toml"); }), HasSubstr("x.toml:1"));
}

TEST(Config, OverridesParseAsTomlOrFallBackToStrings) {
  Config c;
  apply_override(c, "train.steps=7");
  apply_override(c, "train.lr=0.5");
  apply_override(c, "parallel.tp_sequence=true");
  apply_override(c, "data.source=text:some/file.txt");
  apply_override(c, "memory.budget=2GiB");
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
  EXPECT_TRUE(c.parallel.tp_sequence);
  EXPECT_EQ(c.data.source, "text:some/file.txt");
  EXPECT_EQ(c.budget_bytes(), int64_t{2} << 30);
  EXPECT_THAT(input_error([&] { apply_override(c, "train.stpes=3"); }), HasSubstr("did you mean 'train.steps'"));
  EXPECT_THAT(input_error([&] { apply_override(c, "steps3"); }), HasSubstr("section.key=value"));
  EXPECT_THAT(input_error([&] { apply_override(c, "train.steps=many"); }), HasSubstr("must be an integer"));
}

TEST(Config, NumbersBeyond64BitsAreReportedAsNumbersWithTheKey) {
  Config c;
  EXPECT_THAT(input_error([&] { apply_override(c, "train.steps=99000000000000000000"); }),
              HasSubstr("--set train.steps=99000000000000000000: train.steps = 99000000000000000000 is out of range "
                        "of a 64-bit integer (-9223372036854775808 to 9223372036854775807)"));
  EXPECT_THAT(input_error([&] { apply_override(c, "train.seed=-9223372036854775809"); }),
              HasSubstr("train.seed = -9223372036854775809 is out of range of a 64-bit integer"));
  EXPECT_THAT(input_error([&] { apply_override(c, "train.lr=1e400"); }),
              HasSubstr("train.lr = 1e400 is out of range of a 64-bit float"));
  EXPECT_THAT(input_error([&] { apply_override(c, "train.steps=007"); }),
              HasSubstr("train.steps = 007 is not a number TOML can read (leading zeroes are prohibited)"));
  EXPECT_THAT(input_error([&] { apply_override(c, "parallel.pp_cuts=[1, 99999999999999999999]"); }),
              HasSubstr("parallel.pp_cuts = [1, 99999999999999999999]: 99999999999999999999 is out of range of a "
                        "64-bit integer"));
  EXPECT_THAT(input_error([&] { apply_override(c, "model.n_layers="); }),
              HasSubstr("model.n_layers has no value; write e.g. --set model.n_layers=4"));
  apply_override(c, "train.seed=9223372036854775807");  // the largest still fits
  EXPECT_EQ(c.train.seed, std::numeric_limits<int64_t>::max());
  apply_override(c, "memory.budget=4096");  // a string key takes a bare number as its text
  EXPECT_EQ(c.memory.budget, "4096");
  apply_override(c, "memory.budget=\"\"");
  EXPECT_EQ(c.memory.budget, "");

  EXPECT_THAT(input_error([] { parse_config("[train]\nlr = 0.1\nsteps = 99000000000000000000  # long\n", "x"); }),
              HasSubstr("x:3: train.steps = 99000000000000000000 is out of range of a 64-bit integer"));
  EXPECT_THAT(input_error([] { parse_config("[train]\nlr = -1e999\n", "x.toml"); }),
              HasSubstr("x.toml:2: train.lr = -1e999 is out of range of a 64-bit float"));
  EXPECT_THAT(input_error([] { parse_config("[parallel]\npp_cuts = [1, 99999999999999999999]\n", "x.toml"); }),
              HasSubstr("x.toml:2: parallel.pp_cuts: 99999999999999999999 is out of range of a 64-bit integer"));
}

// Every float key of the table refuses inf and nan, from a file and from --set.
TEST(Config, FloatKeysMustBeFinite) {
  size_t float_keys = 0;
  for (const std::string& key : config_keys()) {
    for (const char* value : {"inf", "-inf", "nan"}) {
      Config c;
      try {
        apply_override(c, key + "=" + value);
        EXPECT_NE(to_toml(c).find(value), std::string::npos) << key << " took " << value << " as a string";
      } catch (const InputError& e) {
        const std::string msg = e.what();
        if (msg.find("finite") == std::string::npos) continue;  // not a float key: a type error
        EXPECT_THAT(msg, HasSubstr(fmt::format("{} = {} must be a finite number; hint: the default is", key, value)));
        float_keys += value == std::string("inf");
      }
    }
  }
  // rope_theta, moe_aux_loss_coef, moe_capacity_factor, moe_bias_rate, bucket_mb, recompute_ratio, lr, min_lr_ratio,
  // weight_decay, beta1, beta2, clip, zipf
  EXPECT_EQ(float_keys, 13u);
  EXPECT_THAT(input_error([] { parse_config("[train]\nlr = inf\n", "x.toml"); }),
              HasSubstr("x.toml: train.lr = inf must be a finite number; hint: the default is 0.001"));
  EXPECT_THAT(input_error([] { parse_config("[memory]\nrecompute_ratio = nan\n", "x.toml"); }),
              HasSubstr("memory.recompute_ratio = nan must be a finite number"));
}

TEST(Config, ConfigFileMustBeAReadableFile) {
  EXPECT_THAT(input_error([] { load_config_file("/nonexistent/x.toml"); }), HasSubstr("cannot read config file"));
  const std::string dir = ::testing::TempDir();
  EXPECT_THAT(input_error([&] { load_config_file(dir); }), HasSubstr("config file '" + dir + "' is a directory"));
}

TEST(Config, PrintedConfigReadsBackToTheSameConfig) {
  Config c;
  c.model.dtype = "float64";
  c.train.lr = 1.25e-4;
  c.train.clip = 3;
  c.parallel.pp_cuts = {2, 5};
  c.data.source = "text:a \"quoted\" path";
  EXPECT_EQ(parse_config(to_toml(c), "printed"), c);
  const std::string printed = to_toml(c);
  EXPECT_EQ(config_keys().size(), static_cast<size_t>(std::count(printed.begin(), printed.end(), '=')));
}

TEST(Config, ValidationRefusesInconsistentValues) {
  auto refused = [](auto edit) {
    Config c;
    edit(c);
    return input_error([&] { models::validate_config(c); });
  };
  EXPECT_NO_THROW(models::validate_config(Config{}));
  EXPECT_THAT(refused([](Config& c) { c.model.n_heads = 5; }),
              HasSubstr("model.d_model (256) must be divisible by model.n_heads (5)"));
  EXPECT_THAT(refused([](Config& c) { c.model.max_positions = 128; }),
              HasSubstr("model.seq_len (256) is longer than the position table"));
  EXPECT_THAT(refused([](Config& c) { c.train.global_batch = 6; }), HasSubstr("multiple of train.micro_batch"));
  // An enumerated key is read through its name table (NOTE [Option names]): an unknown name is
  // refused where it is read, with the key and the accepted names.
  Config c;
  EXPECT_THAT(input_error([&] { apply_override(c, "model.dtype=float16"); }),
              HasSubstr("model.dtype = \"float16\" is not one of: float32, float64, bfloat16"));
  EXPECT_THAT(input_error([&] { c.parallel.sp_mode = "spiral"; }),
              HasSubstr("\"spiral\" is not one of: allgather, ring, ulysses"));
  EXPECT_THAT(refused([](Config& c) { c.data.source = "csv:x"; }), HasSubstr("data.source"));
  EXPECT_THAT(refused([](Config& c) { c.memory.budget = "lots"; }), HasSubstr("memory.budget = \"lots\""));
  EXPECT_THAT(refused([](Config& c) { c.train.steps = 0; }), HasSubstr("train.steps = 0 must be positive"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.sp = 4, c.parallel.sp_mode = "ring", c.model.seq_len = 12; }),
              HasSubstr("must be divisible by 8"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.sp = 3; }), HasSubstr("must be divisible by parallel.sp (3)"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.pp = 2, c.parallel.chunks = 2; }),
              HasSubstr("parallel.chunks = 2 needs parallel.schedule = \"interleaved\""));
  EXPECT_THAT(refused([](Config& c) {
                c.parallel.pp = 2, c.parallel.chunks = 3, c.parallel.schedule = "interleaved", c.model.n_layers = 4;
              }),
              HasSubstr("parallel.chunks = 3 must divide model.n_layers (4)"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.schedule = "pipedream"; }), HasSubstr("parallel.schedule"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.tp = 3; }),
              HasSubstr("[tp] model.n_heads (4) must be divisible by parallel.tp (3)"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.dp = 4; }), HasSubstr("parallel.dp (4) must divide the micro-batches"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.schedule = "zigzag"; }), HasSubstr("parallel.schedule"));
}

TEST(Config, ValidationRefusesSizesWhoseProductsPass64Bits) {
  auto refused = [](auto edit) {
    Config c;
    edit(c);
    return input_error([&] { models::validate_config(c); });
  };
  EXPECT_THAT(refused([](Config& c) { c.model.vocab = int64_t{1} << 40, c.model.d_model = int64_t{1} << 30; }),
              HasSubstr("the token table (model.vocab 1099511627776 x model.d_model 1073741824) comes to more than "
                        "2^63; the limit is 2^60"));
  EXPECT_THAT(refused([](Config& c) { c.model.seq_len = c.model.max_positions = int64_t{1} << 50; }),
              HasSubstr("a micro-batch's logits (train.micro_batch 4 x model.seq_len 1125899906842624 x model.vocab "
                        "4096)"));
  EXPECT_THAT(refused([](Config& c) { c.model.n_layers = int64_t{1} << 44; }),
              HasSubstr("the MLP weights of all blocks (model.n_layers 17592186044416 x model.ffn_mult 4 x "
                        "model.d_model 256 x model.d_model 256) comes to 4611686018427387904; the limit is 2^60"));
  EXPECT_THAT(refused([](Config& c) { c.train.steps = std::numeric_limits<int64_t>::max(); }),
              HasSubstr("the samples of the run (train.steps 9223372036854775807 x train.global_batch 8)"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.dp = 1 << 20, c.parallel.tp = 1 << 12; }),
              HasSubstr("the ranks of the layout (parallel.dp 1048576 x parallel.tp 4096 x parallel.pp 1 x "
                        "parallel.sp 1) comes to 4294967296; the limit is 2147483647 ranks"));
  EXPECT_THAT(refused([](Config& c) {
                c.model.kind = "dlrm", c.model.tables = int64_t{1} << 30, c.model.table_rows = int64_t{1} << 30;
              }),
              HasSubstr("the embedding tables (model.tables 1073741824 x model.table_rows 1073741824 x model.d_model "
                        "256) comes to more than 2^63"));
  EXPECT_THAT(refused([](Config& c) { c.model.kind = "dlrm", c.model.top_mlp = {int64_t{1} << 40, 1 << 30}; }),
              HasSubstr("the weight of model.top_mlp[1]"));
  EXPECT_THAT(refused([](Config& c) { c.parallel.bucket_mb = 1e30; }),
              HasSubstr("parallel.bucket_mb = 1e+30 is too large"));
  EXPECT_THAT(refused([](Config& c) { c.train.threads = int64_t{1} << 40; }),
              HasSubstr("train.threads = 1099511627776 must be in [0, 2147483647]"));
  // A Config built in code can still hold nan: every range check refuses it.
  EXPECT_THAT(refused([](Config& c) { c.memory.recompute_ratio = std::nan(""); }),
              HasSubstr("memory.recompute_ratio = nan must be in [0, 1]"));
  EXPECT_THAT(refused([](Config& c) { c.train.beta2 = std::nan(""); }), HasSubstr("train.beta2 (nan)"));
  EXPECT_THAT(refused([](Config& c) { c.train.min_lr_ratio = std::nan(""); }), HasSubstr("train.min_lr_ratio = nan"));
}

TEST(Config, WarningsNameTheValuesOfSettingsThatAreLegalButOdd) {
  Config c;
  EXPECT_EQ(config_warnings(c), std::vector<std::string>{});
  c.train.steps = 100, c.train.warmup = 200, c.train.lr = 1e-3;
  EXPECT_EQ(config_warnings(c),
            std::vector<std::string>{
                "train.warmup (200) >= train.steps (100): the learning rate rises for the whole run and never "
                "decays; it ends at 0.0005, never reaching train.lr = 0.001; hint: warm up for a few percent of the "
                "run, e.g. train.warmup = 5"});
  c.train.warmup = 100;
  ASSERT_EQ(config_warnings(c).size(), 1u);
  EXPECT_THAT(config_warnings(c)[0], HasSubstr("it ends at 0.001, only at the last step reaching train.lr = 0.001"));
  c.train.warmup = 99;
  EXPECT_EQ(config_warnings(c), std::vector<std::string>{});
  c.train.steps = 1, c.train.warmup = 0;  // no warmup at all is fine however short the run
  EXPECT_EQ(config_warnings(c), std::vector<std::string>{});
  c.train.weight_decay = 5, c.train.lr = 0.1;
  ASSERT_EQ(config_warnings(c).size(), 1u);
  EXPECT_THAT(config_warnings(c)[0], HasSubstr("train.weight_decay = 5 is unusually large: each step multiplies every "
                                               "decayed weight by 1 - train.lr x weight_decay = 0.5"));
  c.train.weight_decay = 1;
  EXPECT_EQ(config_warnings(c), std::vector<std::string>{});
}

TEST(Units, ParsesAndFormatsByteSizes) {
  EXPECT_EQ(parse_bytes("2GiB", "k"), int64_t{2} << 30);
  EXPECT_EQ(parse_bytes("1.5 MiB", "k"), 3 << 19);
  EXPECT_EQ(parse_bytes("1GB", "k"), 1000000000);
  EXPECT_EQ(parse_bytes("4096", "k"), 4096);
  EXPECT_EQ(parse_bytes("8388607TiB", "k"), int64_t{8388607} << 40);  // the largest whole TiB below 2^63
  EXPECT_THAT(input_error([] { parse_bytes("2 parsecs", "k"); }), HasSubstr("k = \"2 parsecs\" is not a byte size"));
  EXPECT_THAT(input_error([] { parse_bytes("-1GiB", "k"); }), HasSubstr("k = \"-1GiB\" is negative"));
  EXPECT_THAT(input_error([] { parse_bytes("-inf", "k"); }), HasSubstr("k = \"-inf\" is negative"));
  EXPECT_THAT(input_error([] { parse_bytes("inf", "k"); }), HasSubstr("k = \"inf\" is infinite"));
  EXPECT_THAT(input_error([] { parse_bytes("nanGiB", "k"); }), HasSubstr("k = \"nanGiB\" is not a number of bytes"));
  EXPECT_THAT(input_error([] { parse_bytes("1e400B", "k"); }), HasSubstr("k = \"1e400B\" is too large"));
  EXPECT_THAT(input_error([] { parse_bytes("8388608TiB", "k"); }), HasSubstr("below 8 EiB (2^63 bytes)"));
  EXPECT_THAT(input_error([] { parse_bytes("10000000000000000000", "k"); }), HasSubstr("is too large"));
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.00 GiB");
}

}  // namespace
// NOTE [Option names]: docs/config.md's row for each enumerated key names every value of its table
// (a value added to a table and not documented fails here).
TEST(Config, DocsListEveryOptionName) {
  const char* root = std::getenv("LOOM_SOURCE_DIR");
  if (root == nullptr) GTEST_SKIP() << "LOOM_SOURCE_DIR is set by ctest";
  std::ifstream file(std::string(root) + "/docs/config.md");
  ASSERT_TRUE(file) << "docs/config.md";
  std::map<std::string, std::string> rows;  // "| key |" -> its row
  for (std::string line; std::getline(file, line);)
    if (line.starts_with("| ")) rows[line.substr(2, line.find(" |", 2) - 2)] = line;
  auto expect_all = [&](const std::string& key, const auto& names) {
    ASSERT_TRUE(rows.count(key)) << key << " has no row in docs/config.md";
    for (std::string_view name : names)
      EXPECT_NE(rows[key].find(fmt::format("\"{}\"", name)), std::string::npos) << key << ": \"" << name << "\"";
  };
  expect_all("dtype", OptionNames<DType>::names);
  expect_all("attn_kernel", OptionNames<AttnKernel>::names);
  expect_all("bf16_products", OptionNames<Bf16Products>::names);
  expect_all("sp_mode", OptionNames<SpMode>::names);
  expect_all("recompute", OptionNames<Recompute>::names);
  expect_all("sparse", OptionNames<SparseMode>::names);
  expect_all("token_dtype", OptionNames<TokenWidth>::names);
  expect_all("table_update", OptionNames<TableUpdate>::names);
  expect_all("grad_dtype", OptionNames<GradDType>::names);
  expect_all("swap", OptionNames<Swap>::names);
  expect_all("policy", OptionNames<PolicyMode>::names);
  expect_all("partition", OptionNames<Partition>::names);
  expect_all("schedule", OptionNames<ScheduleKind>::names);
  expect_all("kind", models::model_kind_names());
}

}  // namespace loom

namespace loom {
namespace {

using ::testing::HasSubstr;
using loom::testing::input_error;

// model.vocab = "auto" is stored as 0 and written back as "auto"; any other string is refused, and
// one left unresolved (no token file to read it from) is refused by validation with a hint.
TEST(ConfigText, VocabAutoParsesPrintsAndNeedsATokenFile) {
  Config c = parse_config("[model]\nvocab = \"auto\"\n", "x.toml");
  EXPECT_EQ(c.model.vocab, ModelConfig::kVocabAuto);
  EXPECT_THAT(to_toml(c), HasSubstr("vocab = \"auto\"\n"));
  EXPECT_EQ(parse_config(to_toml(c), "again.toml"), c);
  Config d;
  apply_override(d, "model.vocab=auto");
  EXPECT_EQ(d.model.vocab, ModelConfig::kVocabAuto);
  EXPECT_THAT(input_error([] { parse_config("[model]\nvocab = \"many\"\n", "x.toml"); }),
              HasSubstr("model.vocab must be an integer or \"auto\", got a string ('many')"));
  EXPECT_THAT(input_error([&] { validate(c); }),
              HasSubstr("model.vocab = \"auto\" reads the vocabulary from a token file's sidecar, but data.source = "
                        "\"synthetic\" is not a token file"));
}

// Validation's keys: eval_every needs data.valid, the held-out data may not be the training data
// (except "synthetic", which validates on other samples), and data.valid without eval_every warns.
TEST(ConfigText, ValidationKeysAreCheckedTogether) {
  Config c;
  c.train.eval_every = 10;
  EXPECT_THAT(input_error([&] { validate(c); }), HasSubstr("train.eval_every = 10 needs held-out data: data.valid is empty"));
  c.data.valid = "synthetic";
  EXPECT_NO_THROW(validate(c));
  c.data.source = c.data.valid = "tokens:a.bin";
  EXPECT_THAT(input_error([&] { validate(c); }), HasSubstr("data.valid = \"tokens:a.bin\" is the training data itself"));
  c.data.valid = "tokens:";
  EXPECT_THAT(input_error([&] { validate(c); }), HasSubstr("data.valid = \"tokens:\" is not a data source"));
  c.data.valid = "tokens:b.bin", c.train.eval_tokens = 0;
  EXPECT_THAT(input_error([&] { validate(c); }), HasSubstr("train.eval_tokens"));
  c.train.eval_tokens = 16, c.train.eval_every = -1;
  EXPECT_THAT(input_error([&] { validate(c); }), HasSubstr("train.eval_every = -1 must be >= 0"));
  c.train.eval_every = 0;
  ASSERT_EQ(config_warnings(c).size(), 1u);
  EXPECT_THAT(config_warnings(c)[0], HasSubstr("data.valid = \"tokens:b.bin\" is set, but train.eval_every = 0"));
}

}  // namespace
}  // namespace loom
