#include "loom/plan/cluster.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/install_dirs.h"
#include "loom/dist/hierarchical.h"

#ifndef LOOM_CLUSTER_DIR
#define LOOM_CLUSTER_DIR "clusters"
#endif

namespace loom::plan {

double Cluster::peak(DType dtype) const {
  const auto it = peak_flops.find(dtype);
  LOOM_CHECK_INPUT(it != peak_flops.end(), "cluster {} gives no peak FLOP/s for {} (device.peak_flops); hint: add it",
                   name, name_of(dtype));
  return it->second;
}

double Cluster::gemm_efficiency(double gemm_dim) const {
  if (gemm_dim <= 0) return gemm_max;  // a layer that did not say: the curve's top
  return gemm_max * gemm_dim / (gemm_dim + gemm_half_dim);
}

double Cluster::compute_seconds(const PassWork& w, DType dtype) const {
  const double flops = peak(dtype);
  double bytes = w.elementwise_bytes;
  if (elementwise_kernel == Fusion::Fused) bytes -= w.fusable_bytes;
  if (attention_kernel == Fusion::Unfused) bytes += w.score_bytes;
  return w.gemm_flops / (flops * gemm_efficiency(w.gemm_dim)) + w.attention_flops / (flops * attention_efficiency) +
         bytes / (memory_bytes_per_s * memory_efficiency);
}

double Cluster::beside(double compute_s, double comm_s) const {
  return std::max(compute_s, comm_s) + (1 - overlap) * std::min(compute_s, comm_s);
}

LinkSpec Cluster::crossing_link(int64_t sharing) const {
  LinkSpec link = inter_node;
  if (node_bytes_per_s > 0)
    link.bytes_per_s = std::min(link.bytes_per_s, node_bytes_per_s / static_cast<double>(std::max<int64_t>(1, sharing)));
  return link;
}

double Cluster::collective_seconds(nn::CommOp op, int64_t ranks, double bytes, const GroupSpan& span) const {
  if (ranks <= 1 || bytes <= 0) return 0;
  if (op == nn::CommOp::AllReduce && span.nodes && span.levels >= 2)
    return levels_all_reduce_seconds(ranks, span.levels, bytes, span.sharing);
  if (!span.nodes) {  // this machine's measured costs, the nearest group size at or above
    const MeasuredCollective* best = nullptr;
    for (const MeasuredCollective& m : collectives)
      if (m.op == op && m.ranks >= ranks && (!best || m.ranks < best->ranks)) best = &m;
    if (!best)
      for (const MeasuredCollective& m : collectives)
        if (m.op == op && (!best || m.ranks > best->ranks)) best = &m;
    if (best) return best->alpha_s + best->beta_s_per_byte * bytes;
  }
  const LinkSpec link = span.nodes ? crossing_link(span.sharing) : intra_node;
  const auto n = static_cast<double>(ranks);
  if (op == nn::CommOp::SendRecv) return link.latency_s + bytes / link.bytes_per_s;
  const double half = op == nn::CommOp::AllReduce ? 2 : 1;  // all-reduce = reduce-scatter + all-gather
  const double ring = half * ((n - 1) / n * bytes / link.bytes_per_s + (n - 1) * link.latency_s);
  if (op != nn::CommOp::AllReduce) return ring;
  const double tree = 2 * std::ceil(std::log2(n)) * link.latency_s + 2 * bytes / link.bytes_per_s;
  return std::min(ring, tree);
}

double Cluster::levels_all_reduce_seconds(int64_t ranks, int64_t nodes, double bytes, int64_t sharing) const {
  const double pieces = std::ceil(bytes / static_cast<double>(dist::kLevelsPieceBytes)), piece = bytes / pieces;
  // A piece's all-reduce within the node and its leader's broadcast; its leaders' all-reduce.
  const double within = collective_seconds(nn::CommOp::AllReduce, ranks / nodes, piece, {}) +
                        collective_seconds(nn::CommOp::SendRecv, 2, piece, {});
  const double cross = collective_seconds(nn::CommOp::AllReduce, nodes, piece, {.nodes = true, .sharing = sharing});
  // The pieces through the two stages: the slower stage's time for each, the faster one's once.
  return pieces * std::max(cross, within) + std::min(cross, within);
}

// NOTE [Mesh axes]: each axis' stride is the product of those inside it.
std::vector<int64_t> group_of_rank0(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes) {
  std::vector<int64_t> ranks{0};
  for (std::string_view axis : axes) {
    LOOM_CHECK(std::any_of(mesh.axes().begin(), mesh.axes().end(), [&](const dist::MeshAxis& a) { return a.name == axis; }),
               "unknown mesh axis {}", axis);
    std::vector<int64_t> more;
    for (int64_t r : ranks)
      for (int64_t i = 0; i < mesh.size(axis); ++i) more.push_back(r + i * mesh.stride(axis));
    ranks = std::move(more);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

namespace {

// The nodes a group of these ranks takes the levels over (dist::levels_hosts), 0 where it does not.
int64_t levels_nodes(const std::vector<int64_t>& members, int64_t devices_per_node) {
  std::map<int64_t, int64_t> on_node;  // node -> the group's ranks there
  for (int64_t r : members) ++on_node[r / devices_per_node];
  return dist::levels_hosts(on_node);
}

}  // namespace

int64_t group_levels_nodes(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes,
                           int64_t devices_per_node) {
  return levels_nodes(group_of_rank0(mesh, axes), devices_per_node);
}

bool group_spans_nodes(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes,
                       int64_t devices_per_node) {
  return group_of_rank0(mesh, axes).back() / devices_per_node != 0;
}

int64_t node_sharing(int64_t devices_per_node, int64_t on_node) {
  return std::max<int64_t>(1, devices_per_node / std::max<int64_t>(1, on_node));
}

GroupSpan members_span(const std::vector<int64_t>& members, const Cluster& cluster, int64_t levels) {
  const int64_t dpn = cluster.devices_per_node;
  if (members.empty() || members.back() / dpn == 0) return {};
  const auto on_node = std::count_if(members.begin(), members.end(), [dpn](int64_t r) { return r / dpn == 0; });
  return {.nodes = true, .levels = levels, .sharing = node_sharing(dpn, on_node)};
}

GroupSpan group_span(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes, const Cluster& cluster) {
  const std::vector<int64_t> members = group_of_rank0(mesh, axes);
  return members_span(members, cluster,
                      cluster.kind == DeviceKind::Cpu ? levels_nodes(members, cluster.devices_per_node) : 0);
}

namespace {

// Reads one TOML table with its keys checked: every key must be known, every value present.
class Reader {
 public:
  Reader(const toml::table& table, std::string where, std::string prefix)
      : table_(table), where_(std::move(where)), prefix_(std::move(prefix)) {}
  ~Reader() = default;

  double positive(const std::string& key) {
    const double v = number(key);
    LOOM_CHECK_INPUT(v > 0 && std::isfinite(v), "{}: {}{} = {} must be a positive number; hint: see docs/planner.md",
                     where_, prefix_, key, v);
    return v;
  }
  double fraction(const std::string& key) {
    const double v = number(key);
    LOOM_CHECK_INPUT(v > 0 && v <= 1, "{}: {}{} = {} must be in (0, 1]", where_, prefix_, key, v);
    return v;
  }
  // A share in [0, 1] (`fallback` when absent).
  double share(const std::string& key, double fallback) {
    if (!table_.contains(key)) return known(key), fallback;
    const double v = number(key);
    LOOM_CHECK_INPUT(v >= 0 && v <= 1, "{}: {}{} = {} must be in [0, 1]", where_, prefix_, key, v);
    return v;
  }
  double non_negative(const std::string& key, double fallback) {
    if (!table_.contains(key)) return known(key), fallback;
    const double v = number(key);
    LOOM_CHECK_INPUT(v >= 0 && std::isfinite(v), "{}: {}{} = {} must be zero or positive", where_, prefix_, key, v);
    return v;
  }
  // A count of devices or nodes: a whole number in [minimum, kMaxCount] (`fallback` when absent).
  int64_t count(const std::string& key, int64_t minimum, std::optional<int64_t> fallback = std::nullopt) {
    if (fallback && !table_.contains(key)) return known(key), *fallback;
    const double v = number(key);
    LOOM_CHECK_INPUT(v >= static_cast<double>(minimum) && v <= kMaxCount && v == std::floor(v),
                     "{}: {}{} = {} must be a whole number from {} to {}; hint: see docs/planner.md", where_, prefix_,
                     key, v, minimum, kMaxCount);
    return static_cast<int64_t>(v);
  }
  static constexpr double kMaxCount = 1 << 20;  // more devices or nodes than any machine has
  std::string text(const std::string& key, const std::string& fallback) {
    known(key);
    const toml::node* node = table_.get(key);
    if (!node) return fallback;
    const auto v = node->value<std::string>();
    LOOM_CHECK_INPUT(v.has_value(), "{}: {}{} must be a string", where_, prefix_, key);
    return *v;
  }
  const toml::table& table(const std::string& key) {
    known(key);
    const toml::table* t = table_.get_as<toml::table>(key);
    LOOM_CHECK_INPUT(t != nullptr, "{}: [{}{}] is missing; hint: see clusters/dgx-a100-80gb.toml", where_, prefix_, key);
    return *t;
  }
  // Refuses a key that nothing read (a misspelling would otherwise be ignored).
  void done() const {
    for (const auto& [key, node] : table_)
      LOOM_CHECK_INPUT(known_.count(std::string(key.str())) != 0, "{}: unknown key {}{}; hint: see docs/planner.md",
                       where_, prefix_, key.str());
  }
  double number(const std::string& key) {
    known(key);
    const toml::node* node = table_.get(key);
    LOOM_CHECK_INPUT(node != nullptr, "{}: {}{} is missing; hint: see docs/planner.md", where_, prefix_, key);
    const auto v = node->value<double>();
    LOOM_CHECK_INPUT(v.has_value(), "{}: {}{} must be a number", where_, prefix_, key);
    return *v;
  }
  void known(const std::string& key) { known_.insert(key); }

 private:
  const toml::table& table_;
  std::string where_, prefix_;
  std::set<std::string> known_;
};

LinkSpec read_link(const toml::table& t, const std::string& where, const std::string& prefix) {
  Reader r(t, where, prefix);
  LinkSpec link{.bytes_per_s = r.positive("bandwidth"), .latency_s = r.non_negative("latency", 0)};
  r.done();
  return link;
}

std::vector<MeasuredCollective> read_collectives(const toml::table& root, const std::string& where) {
  std::vector<MeasuredCollective> out;
  const toml::array* list = root.get_as<toml::array>("collective");
  if (root.contains("collective"))
    LOOM_CHECK_INPUT(list != nullptr, "{}: collective must be an array of tables ([[collective]])", where);
  if (!list) return out;
  for (const toml::node& node : *list) {
    const toml::table* t = node.as_table();
    LOOM_CHECK_INPUT(t != nullptr, "{}: each collective must be a table ([[collective]])", where);
    Reader r(*t, where, "collective.");
    MeasuredCollective m{.op = option_from<CommOp>(where + ": collective.op", r.text("op", "")),
                         .ranks = r.count("ranks", 1),
                         .alpha_s = r.non_negative("alpha_s", 0),
                         .beta_s_per_byte = r.non_negative("beta_s_per_byte", 0)};
    LOOM_CHECK_INPUT(m.ranks >= 2, "{}: collective.ranks = {} must be at least 2", where, m.ranks);
    r.done();
    out.push_back(m);
  }
  return out;
}

Measurement read_measurement(const toml::table& t, const std::string& where) {
  Reader r(t, where, "measured.");
  const double unix_time = r.non_negative("unix_time", 0);  // cast below only when it fits (UB otherwise)
  LOOM_CHECK_INPUT(unix_time < 4e18, "{}: measured.unix_time = {} is not a time in seconds since 1970", where,
                   unix_time);
  Measurement m{.unix_time = static_cast<int64_t>(unix_time),
                .ranks = r.count("ranks", 1),
                .threads = r.count("threads", 1),
                .loom_version = r.text("loom", ""),
                .peak_spread = r.non_negative("peak_spread", 0)};
  r.done();
  return m;
}

// [kernels] (NOTE [Kernel fusion]): each key optional, by default what a device of `kind` runs.
void read_kernels(const toml::table& root, Cluster& c, const std::string& where) {
  const Fusion usual = c.kind == DeviceKind::Gpu ? Fusion::Fused : Fusion::Unfused;
  c.attention_kernel = c.elementwise_kernel = usual;
  if (!root.contains("kernels")) return;
  const toml::table* t = root.get_as<toml::table>("kernels");
  LOOM_CHECK_INPUT(t != nullptr, "{}: kernels must be a table ([kernels])", where);
  Reader r(*t, where, "kernels.");
  const std::string usual_name(name_of(usual));
  c.attention_kernel = option_from<Fusion>(where + ": kernels.attention", r.text("attention", usual_name));
  c.elementwise_kernel = option_from<Fusion>(where + ": kernels.elementwise", r.text("elementwise", usual_name));
  r.done();
}

}  // namespace

Cluster cluster_from_toml(const std::string& text, const std::string& where) {
  toml::table root;
  try {
    root = toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}: not a cluster file: {} (line {}); hint: see clusters/dgx-a100-80gb.toml", where,
                                 e.description(), e.source().begin.line));
  }
  Reader top(root, where, "");
  Cluster c{.name = top.text("name", ""), .source = top.text("source", "")};
  LOOM_CHECK_INPUT(!c.name.empty(), "{}: name is missing; hint: name = \"my-cluster\"", where);
  Reader device(top.table("device"), where, "device.");
  // A file without device.kind is a spec sheet's (a GPU's) unless loom measured it: `loom profile`
  // measured only CPUs before it wrote the key (and earlier still, wrote no [measured]).
  const bool measured = root.contains("measured") || c.source.starts_with(kMeasuredSource);
  const std::string kind = device.text("kind", measured ? "cpu" : "gpu");
  c.kind = option_from<DeviceKind>(where + ": device.kind", kind);
  c.devices_per_node = device.count("per_node", 1);
  c.max_nodes = device.count("max_nodes", 0, 0);
  c.memory_bytes = device.positive("memory_bytes");
  c.memory_bytes_per_s = device.positive("memory_bandwidth");
  device.known("peak_flops");
  const toml::table* peaks = top.table("device").get_as<toml::table>("peak_flops");
  LOOM_CHECK_INPUT(peaks != nullptr, "{}: device.peak_flops is missing; hint: peak_flops = {{ bfloat16 = 312e12 }}",
                   where);
  Reader peak(*peaks, where, "device.peak_flops.");
  for (std::string_view dtype : OptionNames<DType>::names)
    if (peaks->contains(dtype)) c.peak_flops[option_from<DType>("", dtype)] = peak.positive(std::string(dtype));
  peak.done();
  LOOM_CHECK_INPUT(!c.peak_flops.empty(), "{}: device.peak_flops names no dtype of: {}", where, option_list<DType>());
  device.done();
  Reader links(top.table("links"), where, "links.");
  c.intra_node = read_link(links.table("intra_node"), where, "links.intra_node.");
  c.inter_node = read_link(links.table("inter_node"), where, "links.inter_node.");
  c.host_bytes_per_s = links.positive("host");
  c.node_bytes_per_s = links.non_negative("node", 0);
  links.done();
  Reader eff(top.table("efficiency"), where, "efficiency.");
  c.gemm_max = eff.fraction("gemm_max");
  c.gemm_half_dim = eff.non_negative("gemm_half_dim", 0);
  c.attention_efficiency = eff.fraction("attention");
  c.memory_efficiency = eff.fraction("memory");
  c.overlap = eff.share("overlap", 1);
  eff.done();
  top.known("kernels");
  read_kernels(root, c, where);
  top.known("collective");
  c.collectives = read_collectives(root, where);
  if (root.contains("measured")) c.measured = read_measurement(top.table("measured"), where);
  top.known("measured");
  top.done();
  return c;
}

Cluster read_cluster(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  const bool path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".toml");
  std::vector<fs::path> tried;
  if (path) tried.emplace_back(name_or_path);
  else {  // the working directory's, an install's (share/loom/clusters), the source tree's
    std::vector<fs::path> dirs{"clusters"};
    if (const fs::path code = code_dir(); !code.empty()) dirs.push_back(code.parent_path() / "share" / "loom" / "clusters");
    dirs.emplace_back(LOOM_CLUSTER_DIR);
    for (const fs::path& dir : dirs) tried.push_back(dir / (name_or_path + ".toml"));
  }
  for (const fs::path& p : tried) {
    std::ifstream in(p);
    if (!in) continue;
    std::ostringstream text;
    text << in.rdbuf();
    return cluster_from_toml(text.str(), p.string());
  }
  std::string names;
  for (const fs::path& p : tried) names += (names.empty() ? "" : ", ") + p.string();
  throw InputError(fmt::format("no cluster file {} (looked for {}); hint: a name from clusters/ (dgx-a100-80gb, "
                               "dgx-h100, local) or a path to a .toml file",
                               name_or_path, names));
}

std::string to_toml(const Cluster& c) {
  std::string peaks;
  for (const auto& [dtype, flops] : c.peak_flops)
    peaks += fmt::format("{}{} = {:.6g}", peaks.empty() ? "" : ", ", name_of(dtype), flops);
  std::string out = fmt::format(
      "name = \"{}\"\nsource = \"{}\"\n\n[device]\nkind = \"{}\"\nper_node = {}\nmax_nodes = {}\nmemory_bytes = {:.6g}\n"
      "memory_bandwidth = {:.6g}\npeak_flops = {{ {} }}\n\n[links]\nintra_node = {{ bandwidth = {:.6g}, latency = "
      "{:.6g} }}\ninter_node = {{ bandwidth = {:.6g}, latency = {:.6g} }}\nhost = {:.6g}\n{}\n[efficiency]\n"
      "gemm_max = {:.6g}\ngemm_half_dim = {:.6g}\nattention = {:.6g}\nmemory = {:.6g}\noverlap = {:.6g}\n\n[kernels]\n"
      "attention = \"{}\"\nelementwise = \"{}\"\n",
      c.name, c.source, name_of(c.kind), c.devices_per_node, c.max_nodes, c.memory_bytes, c.memory_bytes_per_s, peaks,
      c.intra_node.bytes_per_s, c.intra_node.latency_s, c.inter_node.bytes_per_s, c.inter_node.latency_s,
      c.host_bytes_per_s, c.node_bytes_per_s > 0 ? fmt::format("node = {:.6g}\n", c.node_bytes_per_s) : "",
      c.gemm_max, c.gemm_half_dim, c.attention_efficiency, c.memory_efficiency, c.overlap, name_of(c.attention_kernel),
      name_of(c.elementwise_kernel));
  if (const std::optional<Measurement>& m = c.measured)
    out += fmt::format("\n[measured]\nunix_time = {}\nranks = {}\nthreads = {}\nloom = \"{}\"\npeak_spread = {:.6g}\n",
                       m->unix_time, m->ranks, m->threads, m->loom_version, m->peak_spread);
  for (const MeasuredCollective& m : c.collectives)
    out += fmt::format("\n[[collective]]\nop = \"{}\"\nranks = {}\nalpha_s = {:.6g}\nbeta_s_per_byte = {:.6g}\n",
                       name_of(m.op), m.ranks, m.alpha_s, m.beta_s_per_byte);
  return out;
}

void check_gpus(const Cluster& c, int64_t gpus) {
  LOOM_CHECK_INPUT(gpus >= 1, "--gpus {} must be at least 1", gpus);
  if (c.max_nodes <= 0) return;
  LOOM_CHECK_INPUT(gpus <= c.devices_per_node * c.max_nodes,
                   "--gpus {} is more than cluster {} has ({} nodes x {} devices = {}); hint: fewer GPUs, or raise "
                   "device.max_nodes in its file",
                   gpus, c.name, c.max_nodes, c.devices_per_node, c.devices_per_node * c.max_nodes);
}

}  // namespace loom::plan
