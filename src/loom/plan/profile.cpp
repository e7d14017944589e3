#include "loom/plan/profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/json_integer.h"

namespace loom::plan {
namespace {

constexpr std::array<std::string_view, 5> kCollectiveOps{"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                         "send_recv"};
constexpr const char* kHint = "hint: measure this machine again with `loom profile -c CONFIG --out FILE`";

// model.bf16_products is not one: like the CPU, which a profile does not name either, it is how
// this machine multiplies (NOTE [bf16 products]), and "auto" takes the same path on the machine
// that measured.
bool identity_key(const std::string& key) {
  return (key.starts_with("model.") && key != "model.bf16_products") || key == "train.micro_batch" ||
         key == "parallel.tp" || key == "parallel.sp" || key == "parallel.tp_sequence" || key == "parallel.tp_overlap" ||
         key == "parallel.sp_mode";
}

// A measured duration or rate: positive and finite (a zero would divide, a negative is a broken file).
double positive(const nlohmann::json& j, const char* key, const std::string& where, const std::string& what) {
  const double v = j.at(key).get<double>();
  LOOM_CHECK_INPUT(std::isfinite(v) && v > 0, "{}: {} {} = {} must be positive; {}", where, what, key, v, kHint);
  return v;
}

double non_negative(const nlohmann::json& j, const char* key, const std::string& where, const std::string& what) {
  const double v = j.at(key).get<double>();
  LOOM_CHECK_INPUT(std::isfinite(v) && v >= 0, "{}: {} {} = {} must not be negative; {}", where, what, key, v, kHint);
  return v;
}

LayerProfile layer_from_json(const nlohmann::json& j, const std::string& where, size_t index) {
  LayerProfile l{.name = j.at("name").get<std::string>()};
  const std::string what = fmt::format("layer {} ({})", index, l.name);
  l.forward_s = positive(j, "forward_s", where, what);
  l.backward_input_s = positive(j, "backward_input_s", where, what);
  l.backward_weight_s = positive(j, "backward_weight_s", where, what);
  l.param_bytes = non_negative(j, "param_bytes", where, what);
  l.saved_bytes = non_negative(j, "saved_bytes", where, what);
  return l;
}

CollectiveProfile collective_from_json(const nlohmann::json& j, const std::string& where) {
  CollectiveProfile c{.op = j.at("op").get<std::string>(), .ranks = json_integer(j.at("ranks"))};
  LOOM_CHECK_INPUT(std::find(kCollectiveOps.begin(), kCollectiveOps.end(), c.op) != kCollectiveOps.end(),
                   "{}: collective \"{}\" is not one loom uses (all_reduce, all_gather, reduce_scatter, all_to_all, "
                   "send_recv); {}", where, c.op, kHint);
  LOOM_CHECK_INPUT(c.ranks >= 2, "{}: collective {} over {} ranks: a group has at least 2; {}", where, c.op, c.ranks,
                   kHint);
  const std::string what = fmt::format("collective {} over {} ranks:", c.op, c.ranks);
  c.alpha_s = positive(j, "alpha_s", where, what);
  c.beta_s_per_byte = positive(j, "beta_s_per_byte", where, what);
  return c;
}

// The version first: a newer file may have changed anything else.
void check_header(const nlohmann::json& j, const std::string& where) {
  LOOM_CHECK_INPUT(j.is_object(), "{} is not a loom profile: not a JSON object; {}", where, kHint);
  const std::string format = j.contains("format") && j["format"].is_string() ? j["format"].get<std::string>() : "";
  LOOM_CHECK_INPUT(format == kProfileFormat, "{} is not a loom profile: \"format\" is \"{}\", not \"{}\"; {}", where,
                   format, kProfileFormat, kHint);
  const int64_t version = json_integer(j.at("version"));  // NOTE [Integers in JSON]
  LOOM_CHECK_INPUT(version <= kProfileVersion,
                   "{}: profile format version {} is newer than this loom reads (version {}); hint: use the loom "
                   "that wrote it, or measure again with `loom profile -c CONFIG --out FILE`",
                   where, version, kProfileVersion);
  LOOM_CHECK_INPUT(version >= 1, "{}: profile format version {} is not one loom wrote (versions 1 to {}); {}", where,
                   version, kProfileVersion, kHint);
}

Profile parse(const nlohmann::json& j, const std::string& where) {
  check_header(j, where);
  Profile p{.version = json_integer(j.at("version"))};
  for (const auto& [key, value] : j.at("identity").items()) p.identity.emplace_back(key, value.get<std::string>());
  p.threads = json_integer(j.at("threads"));
  LOOM_CHECK_INPUT(p.threads >= 1, "{}: threads = {} must be at least 1; {}", where, p.threads, kHint);
  for (const auto& layer : j.at("layers")) p.layers.push_back(layer_from_json(layer, where, p.layers.size()));
  LOOM_CHECK_INPUT(!p.layers.empty(), "{}: the profile lists no layers; {}", where, kHint);
  const nlohmann::json& copy = j.at("copy");
  p.device_to_host_bytes_per_s = positive(copy, "device_to_host_bytes_per_s", where, "copy");
  p.host_to_device_bytes_per_s = positive(copy, "host_to_device_bytes_per_s", where, "copy");
  for (const auto& c : j.at("collectives")) p.collectives.push_back(collective_from_json(c, where));
  return p;
}

std::string value_of(const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& key) {
  for (const auto& [k, v] : pairs)
    if (k == key) return v;
  return {};
}

bool has_key(const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& key) {
  return std::any_of(pairs.begin(), pairs.end(), [&](const auto& kv) { return kv.first == key; });
}

// Every key of the run's identity must be in the file with the same value, and the file must name
// no other: a file written for another model (or by a loom with other keys) describes other costs.
void check_identity(const Profile& p, const Config& config, const std::string& where) {
  const auto wanted = profile_identity(config);
  for (const auto& [key, value] : wanted) {
    LOOM_CHECK_INPUT(has_key(p.identity, key), "{}: the profile does not record {} (the run has {} = {}); {}", where,
                     key, key, value, kHint);
    const std::string got = value_of(p.identity, key);
    LOOM_CHECK_INPUT(got == value, "{} was measured for another model: {} = {} in the profile, {} in the run; {}",
                     where, key, got, value, kHint);
  }
  for (const auto& [key, value] : p.identity)
    LOOM_CHECK_INPUT(has_key(wanted, key), "{}: the profile records {} = {}, which is not a key of a profile's "
                     "identity here; {}", where, key, value, kHint);
}

void check_layers(const Profile& p, const std::vector<std::string>& names, const std::string& where) {
  LOOM_CHECK_INPUT(p.layers.size() == names.size(), "{}: the profile has {} layers, the run's chain {}; {}", where,
                   p.layers.size(), names.size(), kHint);
  for (size_t i = 0; i < names.size(); ++i)
    LOOM_CHECK_INPUT(p.layers[i].name == names[i], "{}: layer {} is {} in the profile, {} in the run's chain; {}",
                     where, i, p.layers[i].name, names[i], kHint);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> profile_identity(const Config& config) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [key, value] : config_values(config))
    if (identity_key(key)) out.emplace_back(std::move(key), std::move(value));
  std::sort(out.begin(), out.end());  // the order of a JSON object's keys, so a file reads back equal
  return out;
}

nlohmann::json to_json(const Profile& p) {
  nlohmann::json identity = nlohmann::json::object(), layers = nlohmann::json::array(),
                 collectives = nlohmann::json::array();
  for (const auto& [key, value] : p.identity) identity[key] = value;
  for (const LayerProfile& l : p.layers)
    layers.push_back({{"name", l.name}, {"forward_s", l.forward_s}, {"backward_input_s", l.backward_input_s},
                      {"backward_weight_s", l.backward_weight_s}, {"param_bytes", l.param_bytes},
                      {"saved_bytes", l.saved_bytes}});
  for (const CollectiveProfile& c : p.collectives)
    collectives.push_back({{"op", c.op}, {"ranks", c.ranks}, {"alpha_s", c.alpha_s}, {"beta_s_per_byte", c.beta_s_per_byte}});
  return {{"format", kProfileFormat},
          {"version", p.version},
          {"identity", identity},
          {"threads", p.threads},
          {"layers", layers},
          {"copy", {{"device_to_host_bytes_per_s", p.device_to_host_bytes_per_s},
                    {"host_to_device_bytes_per_s", p.host_to_device_bytes_per_s}}},
          {"collectives", collectives}};
}

Profile profile_from_json(const std::string& text, const std::string& where) {
  try {
    return parse(nlohmann::json::parse(text), where);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{} is not a valid loom profile: {}; {}", where, e.what(), kHint));
  }
}

std::string profile_threads_warning(const std::string& path, int64_t profile_threads, int64_t run_threads) {
  if (profile_threads == 0 || profile_threads == run_threads) return "";
  return fmt::format("memory.profile {} was measured with {} threads per rank, but this run uses {}: its layer times, "
                     "and the stage cuts and memory policies chosen with them, are another speed's; hint: measure it "
                     "again with the run's threads, `loom profile -c CONFIG --set train.threads={} --out {}`",
                     path, profile_threads, run_threads, run_threads, path);
}

Profile read_profile_file(const std::string& path) {
  std::ifstream in(path);
  LOOM_CHECK_INPUT(in.good(), "profile {} cannot be read (it does not exist or is not readable); {}", path, kHint);
  std::stringstream text;
  text << in.rdbuf();
  return profile_from_json(text.str(), path);
}

void check_profile(const Profile& profile, const Config& config, const std::vector<std::string>& layer_names,
                   const std::string& where) {
  check_identity(profile, config, where);
  check_layers(profile, layer_names, where);
}

Profile read_profile(const std::string& path, const Config& config, const std::vector<std::string>& layer_names) {
  Profile p = read_profile_file(path);
  check_profile(p, config, layer_names, path);
  return p;
}

}  // namespace loom::plan
