#include "loom/core/config.h"

#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <variant>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/core/toml_text.h"
#include "loom/core/units.h"

namespace loom {
namespace {

using FieldPtr = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*, Option<DType>*,
                              Option<SpMode>*, Option<Recompute>*, Option<SparseMode>*, Option<TokenWidth>*,
                              Option<TableUpdate>*, Option<GradDType>*,
                              Option<Swap>*, Option<PolicyMode>*, Option<Partition>*, Option<AttnKernel>*, Option<TrainDevice>*, Option<Bf16Products>*,
                              Option<Backend>*, Option<MoeScore>*, Option<MoeBalance>*>;

template <class T>
struct IsOption : std::false_type {};
template <class E>
struct IsOption<Option<E>> : std::true_type {};

struct KeySpec {
  std::string_view section;
  std::string_view name;
  FieldPtr (*field)(Config&);
  std::string full() const { return fmt::format("{}.{}", section, name); }
  // An integer key whose 0 is written "auto" (model.vocab).
  bool zero_is_auto() const { return section == "model" && name == "vocab"; }
};

#define LOOM_KEY(sec, key) \
  KeySpec { #sec, #key, [](Config& c) -> FieldPtr { return &c.sec.key; } }

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> specs{
      LOOM_KEY(model, kind),           LOOM_KEY(model, vocab),
      LOOM_KEY(model, d_model),        LOOM_KEY(model, n_layers),
      LOOM_KEY(model, n_heads),        LOOM_KEY(model, seq_len),
      LOOM_KEY(model, max_positions),  LOOM_KEY(model, ffn_mult),
      LOOM_KEY(model, attn_tile),      LOOM_KEY(model, attn_kernel),
      LOOM_KEY(model, dtype),          LOOM_KEY(model, bf16_products),
      LOOM_KEY(model, n_kv_heads),     LOOM_KEY(model, tie_embeddings),
      LOOM_KEY(model, rope_theta),     LOOM_KEY(model, ffn_multiple_of),
      LOOM_KEY(model, moe_experts),    LOOM_KEY(model, moe_top_k),
      LOOM_KEY(model, moe_shared_experts), LOOM_KEY(model, moe_every),
      LOOM_KEY(model, moe_ffn_hidden), LOOM_KEY(model, moe_score),
      LOOM_KEY(model, moe_aux_loss_coef), LOOM_KEY(model, moe_capacity_factor),
      LOOM_KEY(model, moe_balance),        LOOM_KEY(model, moe_bias_rate),
      LOOM_KEY(model, tables),         LOOM_KEY(model, table_rows),
      LOOM_KEY(model, bag_size),       LOOM_KEY(model, dense_features),
      LOOM_KEY(model, bottom_mlp),     LOOM_KEY(model, top_mlp),
      LOOM_KEY(parallel, dp),          LOOM_KEY(parallel, tp),
      LOOM_KEY(parallel, pp),          LOOM_KEY(parallel, sp),
      LOOM_KEY(parallel, schedule),    LOOM_KEY(parallel, chunks),
      LOOM_KEY(parallel, pp_cuts),     LOOM_KEY(parallel, sp_mode),
      LOOM_KEY(parallel, tp_sequence), LOOM_KEY(parallel, tp_overlap),
      LOOM_KEY(parallel, zero),        LOOM_KEY(parallel, shard_group),
      LOOM_KEY(parallel, ep),
      LOOM_KEY(parallel, bucket_mb),
      LOOM_KEY(parallel, sparse),      LOOM_KEY(parallel, sparse_partitions),
      LOOM_KEY(parallel, grad_dtype),  LOOM_KEY(parallel, partition),
      KeySpec{"parallel", "auto", [](Config& c) -> FieldPtr { return &c.parallel.auto_layout; }},
      LOOM_KEY(parallel, backend),
      LOOM_KEY(memory, budget),        LOOM_KEY(memory, recompute),
      LOOM_KEY(memory, recompute_ratio), LOOM_KEY(memory, swap),
      LOOM_KEY(memory, policy),        LOOM_KEY(memory, profile),
      LOOM_KEY(train, steps),          LOOM_KEY(train, global_batch),
      LOOM_KEY(train, micro_batch),    LOOM_KEY(train, lr),
      LOOM_KEY(train, min_lr_ratio),   LOOM_KEY(train, warmup),
      LOOM_KEY(train, weight_decay),   LOOM_KEY(train, beta1),
      LOOM_KEY(train, beta2),          LOOM_KEY(train, clip),
      LOOM_KEY(train, seed),           LOOM_KEY(train, threads),
      LOOM_KEY(train, log_every),      LOOM_KEY(train, table_update),
      LOOM_KEY(train, device),
      LOOM_KEY(train, eval_every),     LOOM_KEY(train, eval_tokens),
      LOOM_KEY(data, source),          LOOM_KEY(data, token_dtype),
      LOOM_KEY(data, zipf),            LOOM_KEY(data, valid),
      LOOM_KEY(checkpoint, dir),       LOOM_KEY(checkpoint, every),
      LOOM_KEY(checkpoint, keep),      LOOM_KEY(checkpoint, async),
      LOOM_KEY(checkpoint, init),
  };
  return specs;
}
#undef LOOM_KEY

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

template <class Range>
std::string closest(std::string_view word, const Range& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (d < best_distance) best_distance = d, best = std::string(candidate);
  }
  return best;
}

std::string closest_key(std::string_view key) { return closest(key, config_keys()); }

// The sections in the order of the key table: "[model], [parallel], ...".
std::string section_list() {
  std::vector<std::string> names;
  for (const auto& section : config_sections()) names.push_back(fmt::format("[{}]", section));
  return fmt::format("{}", fmt::join(names, ", "));
}

// Refuses a section the key table does not have, suggesting a close one (an edit or two away).
void check_section(std::string_view section, std::string_view origin) {
  const std::vector<std::string_view> sections = config_sections();
  if (std::find(sections.begin(), sections.end(), section) != sections.end()) return;
  const std::string best = closest(section, sections);
  const size_t distance = edit_distance(section, best);
  const std::string hint =
      distance <= 2 && distance < section.size() ? fmt::format("did you mean [{}]? ", best) : std::string();
  throw InputError(fmt::format("{}: unknown section [{}]; {}the sections are {}", origin, section, hint,
                               section_list()));
}

const KeySpec& find_key(std::string_view section, std::string_view name, std::string_view origin) {
  check_section(section, origin);
  for (const auto& spec : key_specs())
    if (spec.section == section && spec.name == name) return spec;
  const std::string full = fmt::format("{}.{}", section, name);
  throw InputError(fmt::format("{}: unknown config key '{}'; did you mean '{}'? (`loom config --print` lists every key)",
                               origin, full, closest_key(full)));
}

std::string_view node_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

std::string node_text(const toml::node& node) {
  std::ostringstream out;
  node.visit([&](const auto& v) { out << v; });
  return out.str();
}

std::string toml_value(const FieldPtr& field);

// A key's value in `config` as TOML ("auto" for a zero_is_auto key at 0).
std::string spec_value(const KeySpec& spec, Config& config) {
  const FieldPtr field = spec.field(config);
  if (spec.zero_is_auto() && *std::get<int64_t*>(field) == 0) return "\"auto\"";
  return toml_value(field);
}

// A key's default as TOML, for hints.
std::string default_value(const KeySpec& spec) {
  Config defaults;
  return spec_value(spec, defaults);
}

// TOML reads inf and nan as floats; no float key of loom means either (NOTE [Numbers a key can hold]).
void check_finite(const KeySpec& spec, double value, std::string_view origin) {
  LOOM_CHECK_INPUT(std::isfinite(value), "{}: {} = {} must be a finite number; hint: the default is {}", origin,
                   spec.full(), value, default_value(spec));
}

void assign(const KeySpec& spec, Config& config, const toml::node& node, std::string_view origin) {
  auto wrong = [&](std::string_view want) {
    return InputError(fmt::format("{}: {} must be {}, got {} ({})", origin, spec.full(), want,
                                  node_type_name(node), node_text(node)));
  };
  std::visit(
      [&](auto* field) {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          if (spec.zero_is_auto() && node.is_string() && node.as_string()->get() == "auto") {
            *field = 0;
            return;
          }
          if (!node.is_integer()) throw wrong(spec.zero_is_auto() ? "an integer or \"auto\"" : "an integer");
          *field = node.as_integer()->get();
        } else if constexpr (std::is_same_v<T, double>) {
          if (node.is_integer()) *field = static_cast<double>(node.as_integer()->get());
          else if (node.is_floating_point()) *field = node.as_floating_point()->get();
          else throw wrong("a number");
          check_finite(spec, *field, origin);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) throw wrong("a boolean (true or false)");
          *field = node.as_boolean()->get();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) throw wrong("a string");
          *field = node.as_string()->get();
        } else if constexpr (IsOption<T>::value) {  // NOTE [Option names]
          if (!node.is_string()) throw wrong(fmt::format("one of: {}", option_list<decltype(field->value)>()));
          const std::string key = fmt::format("{}: {}", origin, spec.full());
          field->value = option_from<decltype(field->value)>(key, node.as_string()->get());
        } else {
          const toml::array* array = node.as_array();
          if (array == nullptr || (!array->empty() && !array->is_homogeneous(toml::node_type::integer)))
            throw wrong("an array of integers");
          field->clear();
          for (const auto& item : *array) field->push_back(item.as_integer()->get());
        }
      },
      spec.field(config));
}

std::string toml_value(const FieldPtr& field) {
  return std::visit(
      [](auto* f) -> std::string {
        using T = std::remove_pointer_t<decltype(f)>;
        if constexpr (std::is_same_v<T, int64_t>) return fmt::format("{}", *f);
        else if constexpr (std::is_same_v<T, bool>) return *f ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) {
          std::string s = fmt::format("{}", *f);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          return s;
        } else if constexpr (IsOption<T>::value) {
          return fmt::format("\"{}\"", f->name());
        } else if constexpr (std::is_same_v<T, std::string>) {
          // TOML's basic string: a quote, a backslash and control characters (a path may hold
          // any) escaped, or the text does not read back (a checkpoint's config must).
          std::string s = "\"";
          for (char c : *f) {
            const auto u = static_cast<unsigned char>(c);
            if (c == '"' || c == '\\') s += std::string{'\\', c};
            else if (u < 0x20 || u == 0x7F) s += fmt::format("\\u{:04X}", u);
            else s += c;
          }
          return s + "\"";
        } else {
          return fmt::format("[{}]", fmt::join(*f, ", "));
        }
      },
      field);
}

}  // namespace

std::vector<std::string_view> config_sections() {
  std::vector<std::string_view> sections;
  for (const auto& spec : key_specs())
    if (std::find(sections.begin(), sections.end(), spec.section) == sections.end()) sections.push_back(spec.section);
  return sections;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const auto& spec : key_specs()) keys.push_back(spec.full());
  return keys;
}

int64_t Config::budget_bytes() const {
  return memory.budget.empty() ? 0 : parse_bytes(memory.budget, "memory.budget");
}

Config parse_config(std::string_view toml_text, std::string_view origin) {
  const toml::table root = parse_toml(toml_text, origin);
  Config config;
  for (const auto& [section_key, section_node] : root) {
    const std::string_view section = section_key.str();
    const toml::table* table = section_node.as_table();
    if (table == nullptr) {
      throw InputError(fmt::format("{}: '{}' is outside any section; config keys live in the sections {} (did you "
                                   "mean '{}'?)",
                                   origin, section, section_list(), closest_key(section)));
    }
    for (const auto& [name, node] : *table) assign(find_key(section, name.str(), origin), config, node, origin);
  }
  return config;
}

Config load_config_file(const std::string& path) {
  std::error_code error;
  // A directory opens as an empty stream, which would read as a config of defaults.
  LOOM_CHECK_INPUT(!std::filesystem::is_directory(path, error),
                   "config file '{}' is a directory; give a TOML file (configs/ has examples)", path);
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK_INPUT(in.good(), "cannot read config file '{}'; check the path (configs/ has examples)", path);
  std::stringstream text;
  text << in.rdbuf();
  LOOM_CHECK_INPUT(!in.bad(), "cannot read config file '{}' to the end; check that it is a readable file", path);
  return parse_config(text.str(), path);
}

void apply_override(Config& config, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  const std::string_view key = assignment.substr(0, eq);
  const size_t dot = key.find('.');
  LOOM_CHECK_INPUT(eq != std::string_view::npos && dot != std::string_view::npos,
                   "--set '{}': write section.key=value, e.g. --set train.steps=20", assignment);
  const std::string_view value = assignment.substr(eq + 1);
  // A config is TOML (a checkpoint stores it so), which holds UTF-8 text only.
  LOOM_CHECK_INPUT(is_utf8(assignment), "--set: an assignment that is not UTF-8 text; a config holds only UTF-8");
  const std::string origin = fmt::format("--set {}", assignment);
  const KeySpec& spec = find_key(key.substr(0, dot), key.substr(dot + 1), origin);
  const auto as_string = [&] { assign(spec, config, toml::value<std::string>(std::string(value)), origin); };
  // A string key takes unquoted text as it is, so memory.budget=4096 is the size, not an integer.
  const bool is_string = !std::holds_alternative<int64_t*>(spec.field(config)) &&
                         !std::holds_alternative<double*>(spec.field(config)) &&
                         !std::holds_alternative<bool*>(spec.field(config)) &&
                         !std::holds_alternative<std::vector<int64_t>*>(spec.field(config));  // strings, options
  const bool quoted = value.starts_with('"') || value.starts_with('\'');
  if ((is_string && !quoted) || value.find('\n') != std::string_view::npos) return as_string();
  LOOM_CHECK_INPUT(!is_blank(value), "{}: {} has no value; write e.g. --set {}={}", origin, spec.full(), spec.full(),
                   default_value(spec));
  const std::optional<toml::table> parsed = parse_set_value(value, fmt::format("{}: {}", origin, spec.full()));
  if (!parsed) return as_string();
  assign(spec, config, *parsed->get("v"), origin);
}

std::vector<std::pair<std::string, std::string>> config_values(const Config& config) {
  Config copy = config;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& spec : key_specs()) out.emplace_back(spec.full(), spec_value(spec, copy));
  return out;
}

std::string to_toml(const Config& config) {
  return to_toml(config, [](const std::string&) { return true; });
}

std::string to_toml(const Config& config, const std::function<bool(const std::string& key)>& show) {
  std::string out, section;
  for (const auto& [key, value] : config_values(config)) {
    if (!show(key)) continue;
    const size_t dot = key.find('.');
    if (key.substr(0, dot) != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", key.substr(0, dot));
      section = key.substr(0, dot);
    }
    out += fmt::format("{} = {}\n", key.substr(dot + 1), value);
  }
  return out;
}

}  // namespace loom
