#include "loom/core/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <variant>

#include "loom/core/error.h"
#include "loom/core/units.h"

namespace loom {
namespace {

using FieldPtr = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*>;

struct KeySpec {
  std::string_view section;
  std::string_view name;
  FieldPtr (*field)(Config&);
  std::string full() const { return fmt::format("{}.{}", section, name); }
};

#define LOOM_KEY(sec, key) \
  KeySpec { #sec, #key, [](Config& c) -> FieldPtr { return &c.sec.key; } }

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> specs{
      LOOM_KEY(model, kind),           LOOM_KEY(model, vocab),
      LOOM_KEY(model, d_model),        LOOM_KEY(model, n_layers),
      LOOM_KEY(model, n_heads),        LOOM_KEY(model, seq_len),
      LOOM_KEY(model, max_positions),  LOOM_KEY(model, ffn_mult),
      LOOM_KEY(model, attn_tile),      LOOM_KEY(model, dtype),
      LOOM_KEY(model, tables),         LOOM_KEY(model, table_rows),
      LOOM_KEY(model, bag_size),       LOOM_KEY(model, dense_features),
      LOOM_KEY(model, bottom_mlp),     LOOM_KEY(model, top_mlp),
      LOOM_KEY(parallel, dp),          LOOM_KEY(parallel, tp),
      LOOM_KEY(parallel, pp),          LOOM_KEY(parallel, sp),
      LOOM_KEY(parallel, schedule),    LOOM_KEY(parallel, chunks),
      LOOM_KEY(parallel, pp_cuts),     LOOM_KEY(parallel, sp_mode),
      LOOM_KEY(parallel, tp_sequence), LOOM_KEY(parallel, tp_overlap),
      LOOM_KEY(parallel, zero),        LOOM_KEY(parallel, bucket_mb),
      LOOM_KEY(parallel, sparse),      LOOM_KEY(parallel, sparse_partitions),
      LOOM_KEY(memory, budget),        LOOM_KEY(memory, recompute),
      LOOM_KEY(memory, recompute_ratio),
      LOOM_KEY(train, steps),          LOOM_KEY(train, global_batch),
      LOOM_KEY(train, micro_batch),    LOOM_KEY(train, lr),
      LOOM_KEY(train, min_lr_ratio),   LOOM_KEY(train, warmup),
      LOOM_KEY(train, weight_decay),   LOOM_KEY(train, beta1),
      LOOM_KEY(train, beta2),          LOOM_KEY(train, clip),
      LOOM_KEY(train, seed),           LOOM_KEY(train, threads),
      LOOM_KEY(train, log_every),
      LOOM_KEY(data, source),          LOOM_KEY(data, token_dtype),
      LOOM_KEY(data, zipf),
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

std::string closest_key(std::string_view key) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& candidate : config_keys()) {
    const size_t d = edit_distance(key, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  }
  return best;
}

const KeySpec& find_key(std::string_view section, std::string_view name, std::string_view origin) {
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

void assign(const KeySpec& spec, Config& config, const toml::node& node, std::string_view origin) {
  auto wrong = [&](std::string_view want) {
    return InputError(fmt::format("{}: {} must be {}, got {} ({})", origin, spec.full(), want,
                                  node_type_name(node), node_text(node)));
  };
  std::visit(
      [&](auto* field) {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          if (!node.is_integer()) throw wrong("an integer");
          *field = node.as_integer()->get();
        } else if constexpr (std::is_same_v<T, double>) {
          if (node.is_integer()) *field = static_cast<double>(node.as_integer()->get());
          else if (node.is_floating_point()) *field = node.as_floating_point()->get();
          else throw wrong("a number");
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) throw wrong("a boolean (true or false)");
          *field = node.as_boolean()->get();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) throw wrong("a string");
          *field = node.as_string()->get();
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

toml::table parse_toml(std::string_view text, std::string_view origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}:{}: {}", origin, e.source().begin.line,
                                 e.source().begin.column, e.description()));
  }
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
        } else if constexpr (std::is_same_v<T, std::string>) {
          std::string s = "\"";
          for (char c : *f) s += (c == '"' || c == '\\') ? std::string{'\\', c} : std::string{c};
          return s + "\"";
        } else {
          return fmt::format("[{}]", fmt::join(*f, ", "));
        }
      },
      field);
}

}  // namespace

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
      throw InputError(fmt::format(
          "{}: '{}' is outside any section; config keys live in [model], [parallel], [memory], "
          "[train] or [data] (did you mean '{}'?)",
          origin, section, closest_key(section)));
    }
    for (const auto& [name, node] : *table) assign(find_key(section, name.str(), origin), config, node, origin);
  }
  return config;
}

Config load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK_INPUT(in.good(), "cannot read config file '{}'; check the path (configs/ has examples)", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

void apply_override(Config& config, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  const std::string_view key = assignment.substr(0, eq);
  const size_t dot = key.find('.');
  LOOM_CHECK_INPUT(eq != std::string_view::npos && dot != std::string_view::npos,
                   "--set '{}': write section.key=value, e.g. --set train.steps=20", assignment);
  const std::string_view value = assignment.substr(eq + 1);
  const std::string origin = fmt::format("--set {}", assignment);
  const KeySpec& spec = find_key(key.substr(0, dot), key.substr(dot + 1), origin);
  toml::table parsed;
  bool is_toml = value.find('\n') == std::string_view::npos;
  if (is_toml) {
    try {
      parsed = toml::parse(fmt::format("v = {}", value));
    } catch (const toml::parse_error&) {
      is_toml = false;
    }
  }
  if (is_toml) assign(spec, config, *parsed.get("v"), origin);
  else assign(spec, config, toml::value<std::string>(std::string(value)), origin);
}

std::string to_toml(const Config& config) {
  Config copy = config;
  std::string out;
  std::string_view section;
  for (const auto& spec : key_specs()) {
    if (spec.section != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", spec.section);
      section = spec.section;
    }
    out += fmt::format("{} = {}\n", spec.name, toml_value(spec.field(copy)));
  }
  return out;
}

}  // namespace loom
