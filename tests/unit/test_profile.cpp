// NOTE [Profile]: the profile file reads back to the same value, and a file that does not belong to
// the run (another format, a newer version, another model, another chain) or holds a time that is
// not positive is refused with one InputError naming the key and both values. The measurement
// itself is checked on a small chain: every layer, positive times, the bytes its states hold.
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/registry.h"
#include "loom/plan/profile.h"
#include "loom/plan/run_plan.h"
#include "loom/train/profile_run.h"
#include "unit/input_error.h"

namespace loom::plan {

// So that a failed EXPECT_EQ prints the two profiles as their files would read.
void PrintTo(const Profile& p, std::ostream* os) { *os << to_json(p).dump(); }

namespace {

using ::testing::HasSubstr;

using loom::testing::input_error;

Config tiny_config() {
  Config c;
  c.model.vocab = 64;
  c.model.d_model = 16;
  c.model.n_layers = 1;
  c.model.n_heads = 2;
  c.model.seq_len = 8;
  c.train.micro_batch = 2;
  c.train.global_batch = 2;
  c.train.threads = 1;
  return c;
}

std::vector<std::string> chain_names(const Config& c) {
  std::vector<std::string> names;
  for (const LayerPlan& layer : make_plan(c, 1, CostModel{}).chain) names.push_back(layer.name);  // the names only
  return names;
}

// A hand-written profile of `c`'s chain with awkward numbers (they must read back exactly).
Profile sample_profile(const Config& c) {
  Profile p{.identity = profile_identity(c), .threads = 3};
  double t = 1.0 / 3.0e3;
  for (const std::string& name : chain_names(c)) {
    p.layers.push_back({.name = name, .forward_s = t, .backward_input_s = 2.1 * t, .backward_weight_s = 1e-9,
                        .param_bytes = 4096, .saved_bytes = name.find("head") != std::string::npos ? 0.0 : 12345678});
    t *= 1.7;
  }
  p.device_to_host_bytes_per_s = 7.25e9;
  p.host_to_device_bytes_per_s = 6.5e9 / 7.0;
  p.collectives = {{.op = "all_reduce", .ranks = 2, .alpha_s = 2.5e-6, .beta_s_per_byte = 1.0 / 3e9},
                   {.op = "send_recv", .ranks = 2, .alpha_s = 1e-7, .beta_s_per_byte = 1e-15}};
  return p;
}

class ProfileFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() / ("loom_profile_" + std::to_string(::getpid()) + ".json")).string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const nlohmann::json& j) const { std::ofstream(path_) << j.dump(1); }
  std::string path_;
};

TEST(Profile, IdentityHoldsTheKeysThatShapeALayersCost) {
  Config c = tiny_config();
  const auto identity = profile_identity(c);
  auto value = [&](const std::string& key) {
    for (const auto& [k, v] : identity)
      if (k == key) return v;
    return std::string("absent");
  };
  EXPECT_EQ(value("model.d_model"), "16");
  EXPECT_EQ(value("model.kind"), "\"gpt\"");
  EXPECT_EQ(value("train.micro_batch"), "2");
  EXPECT_EQ(value("parallel.tp"), "1");
  EXPECT_EQ(value("parallel.sp"), "1");
  EXPECT_EQ(value("parallel.tp_sequence"), "false");
  EXPECT_EQ(value("parallel.dp"), "absent");  // replicas do not change a layer's cost
  EXPECT_EQ(value("train.lr"), "absent");
  EXPECT_TRUE(std::is_sorted(identity.begin(), identity.end()));
}

TEST(Profile, RoundTripsThroughJson) {
  const Profile want = sample_profile(tiny_config());
  const nlohmann::json j = to_json(want);
  EXPECT_EQ(j["format"], "loom-profile");
  EXPECT_EQ(j["version"], kProfileVersion);
  EXPECT_EQ(j["identity"]["model.d_model"], "16");
  EXPECT_EQ(j["layers"][0]["name"], want.layers[0].name);
  EXPECT_EQ(profile_from_json(j.dump(2), "p.json"), want);
}

TEST(Profile, RefusesANewerVersionAndAnotherFormat) {
  nlohmann::json j = to_json(sample_profile(tiny_config()));
  j["version"] = kProfileVersion + 1;
  j["layers"] = "a newer version may change anything";
  EXPECT_THAT(input_error([&] { profile_from_json(j.dump(), "p.json"); }),
              HasSubstr("p.json: profile format version 2 is newer than this loom reads (version 1)"));
  j = to_json(sample_profile(tiny_config()));
  j["version"] = 0;
  EXPECT_THAT(input_error([&] { profile_from_json(j.dump(), "p.json"); }), HasSubstr("version 0 is not one loom wrote"));
  j["format"] = "loom-checkpoint";
  EXPECT_THAT(input_error([&] { profile_from_json(j.dump(), "p.json"); }),
              HasSubstr("p.json is not a loom profile: \"format\" is \"loom-checkpoint\", not \"loom-profile\""));
  EXPECT_THAT(input_error([] { profile_from_json("[1, 2]", "p.json"); }), HasSubstr("not a loom profile"));
  EXPECT_THAT(input_error([] { profile_from_json("{\"format\": \"loom-pro", "p.json"); }),
              HasSubstr("p.json is not a valid loom profile"));
  j = to_json(sample_profile(tiny_config()));
  j["layers"][0].erase("saved_bytes");
  EXPECT_THAT(input_error([&] { profile_from_json(j.dump(), "p.json"); }), HasSubstr("saved_bytes"));
}

TEST(Profile, RefusesTimesAndRatesThatAreNotPositive) {
  const nlohmann::json good = to_json(sample_profile(tiny_config()));
  const std::string first = good["layers"][0]["name"];
  auto refused = [&](const std::function<void(nlohmann::json&)>& spoil) {
    nlohmann::json j = good;
    spoil(j);
    return input_error([&] { profile_from_json(j.dump(), "p.json"); });
  };
  EXPECT_THAT(refused([](nlohmann::json& j) { j["layers"][0]["forward_s"] = 0.0; }),
              HasSubstr("p.json: layer 0 (" + first + ") forward_s = 0 must be positive"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["layers"][1]["backward_input_s"] = -1e-3; }),
              HasSubstr("backward_input_s = -0.001 must be positive"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["layers"][1]["backward_weight_s"] = 0; }),
              HasSubstr("backward_weight_s = 0 must be positive"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["layers"][0]["saved_bytes"] = -1; }),
              HasSubstr("saved_bytes = -1 must not be negative"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["copy"]["host_to_device_bytes_per_s"] = 0; }),
              HasSubstr("copy host_to_device_bytes_per_s = 0 must be positive"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["collectives"][0]["alpha_s"] = -2e-6; }),
              HasSubstr("collective all_reduce over 2 ranks: alpha_s = -2e-06 must be positive"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["collectives"][0]["op"] = "gossip"; }),
              HasSubstr("collective \"gossip\" is not one loom uses"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["collectives"][0]["ranks"] = 1; }),
              HasSubstr("over 1 ranks: a group has at least 2"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["layers"] = nlohmann::json::array(); }), HasSubstr("lists no layers"));
  EXPECT_THAT(refused([](nlohmann::json& j) { j["threads"] = 0; }), HasSubstr("threads = 0 must be at least 1"));
}

TEST_F(ProfileFile, ReadsAFileOfTheSameModel) {
  const Config c = tiny_config();
  write(to_json(sample_profile(c)));
  EXPECT_EQ(read_profile(path_, c, chain_names(c)), sample_profile(c));
}

TEST_F(ProfileFile, RefusesAProfileOfAnotherModelNamingTheKeyAndBothValues) {
  const Config measured = tiny_config();
  write(to_json(sample_profile(measured)));
  Config run = measured;
  run.model.d_model = 32;
  EXPECT_THAT(input_error([&] { read_profile(path_, run, chain_names(run)); }),
              HasSubstr(path_ + " was measured for another model: model.d_model = 16 in the profile, 32 in the run"));
  run = measured;
  run.train.micro_batch = 1;
  EXPECT_THAT(input_error([&] { read_profile(path_, run, chain_names(run)); }),
              HasSubstr("train.micro_batch = 2 in the profile, 1 in the run"));
  run = measured;
  run.parallel.tp = 2;
  EXPECT_THAT(input_error([&] { read_profile(path_, run, chain_names(measured)); }),
              HasSubstr("parallel.tp = 1 in the profile, 2 in the run"));
  nlohmann::json j = to_json(sample_profile(measured));
  j["identity"].erase("model.seq_len");
  j["identity"]["model.colour"] = "\"blue\"";
  write(j);
  EXPECT_THAT(input_error([&] { read_profile(path_, measured, chain_names(measured)); }),
              HasSubstr("the profile does not record model.seq_len (the run has model.seq_len = 8)"));
  j["identity"]["model.seq_len"] = "8";
  write(j);
  EXPECT_THAT(input_error([&] { read_profile(path_, measured, chain_names(measured)); }),
              HasSubstr("the profile records model.colour = \"blue\", which is not a key of a profile's identity"));
}

TEST_F(ProfileFile, RefusesAnotherChain) {
  const Config c = tiny_config();
  std::vector<std::string> names = chain_names(c);
  write(to_json(sample_profile(c)));
  names.push_back("blocks.1.attn");
  EXPECT_THAT(input_error([&] { read_profile(path_, c, names); }),
              HasSubstr(fmt::format("the profile has {} layers, the run's chain {}", names.size() - 1, names.size())));
  names.pop_back();
  const std::string first = names[0];
  names[0] = "embedding.renamed";
  EXPECT_THAT(input_error([&] { read_profile(path_, c, names); }),
              HasSubstr(fmt::format("layer 0 is {} in the profile, embedding.renamed in the run's chain", first)));
  std::filesystem::remove(path_);
  EXPECT_THAT(input_error([&] { read_profile(path_, c, chain_names(c)); }), HasSubstr("cannot be read"));
}

// A run's plan records the threads its memory.profile was measured with; another count than the
// run's is warned of, naming both (the times are another speed's).
TEST_F(ProfileFile, AnotherThreadCountThanTheRunsIsWarnedOf) {
  Config c = tiny_config();
  write(to_json(sample_profile(c)));  // measured with 3 threads
  c.memory.profile = path_;
  EXPECT_EQ(make_plan(c, 1, CostModel::for_config(c)).profile_threads, 3);
  EXPECT_EQ(make_plan(tiny_config(), 1, CostModel::for_config(tiny_config())).profile_threads, 0);
  EXPECT_EQ(profile_threads_warning(path_, 3, 3), "");
  EXPECT_EQ(profile_threads_warning("", 0, 2), "");
  EXPECT_THAT(profile_threads_warning(path_, 3, 1),
              HasSubstr("memory.profile " + path_ + " was measured with 3 threads per rank, but this run uses 1: "));
  EXPECT_THAT(profile_threads_warning(path_, 3, 1),
              HasSubstr("hint: measure it again with the run's threads, `loom profile -c CONFIG --set "
                        "train.threads=1 --out " + path_ + "`"));
}

TEST(ProfileFit, RecoversALineAndClampsANegativeIntercept) {
  const std::vector<double> bytes{4096, 16384, 65536, 262144, 1048576};
  std::vector<double> seconds;
  for (double b : bytes) seconds.push_back(5e-6 + b / 2e9);
  train::LineFit fit = train::fit_alpha_beta(bytes, seconds);
  EXPECT_NEAR(fit.alpha_s, 5e-6, 1e-12);
  EXPECT_NEAR(fit.beta_s_per_byte, 0.5e-9, 1e-18);
  seconds.clear();
  for (double b : bytes) seconds.push_back(-1e-6 + b / 1e9);  // noise can put the intercept below zero
  fit = train::fit_alpha_beta(bytes, seconds);
  EXPECT_EQ(fit.alpha_s, 1e-7);
  EXPECT_GT(fit.beta_s_per_byte, 0.9e-9);
  EXPECT_LT(fit.beta_s_per_byte, 1e-9);
  fit = train::fit_alpha_beta({4096, 8192}, {2e-5, 1e-5});  // time falling with size: beta clamped
  EXPECT_GT(fit.alpha_s, 0);
  EXPECT_EQ(fit.beta_s_per_byte, 1e-15);
}

// A shaped link (a token bucket of 256 KiB at 125 MB/s behind a 4 GB/s wire, as the test cluster's)
// carries each message's first 256 KiB at once: the line fit reads it faster than it is, the
// sustained fit reads its rate, and the line again where the largest two tie.
TEST(ProfileFit, ReadsAShapedLinksSustainedRate) {
  const double bucket = 262144, rate = 125e6, wire = 4e9, latency = 20e-6;
  std::vector<double> bytes, seconds;
  for (double b = 4096; b <= 16777216; b *= 4) {
    bytes.push_back(b);
    seconds.push_back(latency + std::min(b, bucket) / wire + std::max(0.0, b - bucket) / rate);
  }
  EXPECT_GT(1 / train::fit_alpha_beta(bytes, seconds).beta_s_per_byte, 1.3 * rate);
  const train::LineFit fit = train::fit_sustained(bytes, seconds);
  EXPECT_NEAR(1 / fit.beta_s_per_byte, rate, 1e-6 * rate);
  EXPECT_EQ(fit.alpha_s, seconds[0]);  // the bucket's bytes came faster than the rate: all latency
  const std::vector<double> sizes{4096, 65536, 1048576};
  std::vector<double> plain_seconds;  // an unshaped link: the line itself
  for (double b : sizes) plain_seconds.push_back(latency + b / rate);
  const train::LineFit plain = train::fit_sustained(sizes, plain_seconds);
  EXPECT_NEAR(plain.beta_s_per_byte, 1 / rate, 1e-6 / rate);
  EXPECT_NEAR(plain.alpha_s, latency, 1e-9);
  const train::LineFit tied = train::fit_sustained({4096, 65536, 1048576}, {25e-6, 1e-3, 1e-3});
  EXPECT_EQ(tied.beta_s_per_byte, train::fit_alpha_beta({4096, 65536, 1048576}, {25e-6, 1e-3, 1e-3}).beta_s_per_byte);
}

// One process measures a small chain: every layer of the chain in order, positive times, and each
// layer's parameter and saved bytes, which for a float32 GPT equal the plan's analytic ones (the
// measured bytes are the storages the saved states hold; the estimate is a formula per layer).
TEST(ProfileRun, MeasuresEveryLayerOfTheChain) {
  const Config c = tiny_config();
  const int threads = at::get_num_threads();
  dist::NullCommunicator world;
  const Profile p = train::measure_profile(c, world, {.repeats = 2});
  at::set_num_threads(threads);
  const RunPlan plan = make_plan(c, 1, CostModel::for_config(c));
  ASSERT_EQ(p.layers.size(), plan.chain.size());
  EXPECT_EQ(p.identity, profile_identity(c));
  EXPECT_EQ(p.threads, 1);
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const LayerProfile& l = p.layers[i];
    EXPECT_EQ(l.name, plan.chain[i].name);
    EXPECT_GT(l.forward_s, 0);
    EXPECT_GT(l.backward_input_s, 0);
    EXPECT_GT(l.backward_weight_s, 0);
    EXPECT_EQ(l.param_bytes, plan.chain[i].cost.param_bytes) << l.name;
    EXPECT_EQ(l.saved_bytes, plan.chain[i].cost.saved_bytes) << l.name;
  }
  EXPECT_GT(p.device_to_host_bytes_per_s, 0);
  EXPECT_GT(p.host_to_device_bytes_per_s, 0);
  EXPECT_TRUE(p.collectives.empty());  // a world of one has no group to time
  EXPECT_EQ(profile_from_json(to_json(p).dump(), "measured"), p);
}

TEST(ProfileRun, RefusesATensorParallelChainWithoutTheRanks) {
  Config c = tiny_config();
  c.parallel.tp = 2;
  EXPECT_THAT(input_error([&] { train::check_profile_input(c, 1, {}); }),
              HasSubstr("[profile] parallel.tp (2) x parallel.sp (1) = 2 ranks measure the layers together, but the "
                        "job has 1; hint: run it under mpiexec -n 2"));
  EXPECT_THAT(input_error([&] { train::check_profile_input(tiny_config(), 1, {.repeats = 0}); }),
              HasSubstr("--repeats 0 must be between 1 and 1000"));
}

}  // namespace
}  // namespace loom::plan
