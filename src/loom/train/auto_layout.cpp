#include "loom/train/auto_layout.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <string_view>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/core/units.h"
#include "loom/dist/gather_text.h"
#include "loom/dist/input_agreement.h"
#include "loom/plan/planner.h"
#include "loom/train/profile_run.h"

namespace loom::train {
namespace {

constexpr const char* kCacheHeader =
    "# This machine as `loom train` with parallel.auto = true measured it (the measurement of `loom profile\n"
    "# --cluster-out`; NOTE [parallel.auto] in train/auto_layout.h). Delete this file to measure again.\n";

// This rank's part of an input check, then agreement: a refusal on any rank ends every rank with
// the first one's message before the next collective.
template <class Check>
void agreed(dist::Communicator& world, Check&& check) {
  std::exception_ptr failure;
  try {
    check();
  } catch (const InputError&) {
    failure = std::current_exception();
  }
  dist::agree_on_input(world, failure);
}

// Rank 0's text on every rank (the others' are not sent).
std::string from_rank0(dist::Communicator& world, const std::string& text) {
  return dist::all_gather_text(world, world.rank() == 0 ? text : std::string())[0];
}

// The `local` cluster is this machine: ranks elsewhere would be planned as if they were here.
void check_one_host(const dist::Communicator& world) {
  LOOM_CHECK_INPUT(world.local_ranks() == world.size(),
                   "parallel.auto plans on the `local` cluster (this machine), but only {} of the job's {} ranks run "
                   "on this host; hint: run every rank on one machine, or choose the layout with `loom plan -c CONFIG "
                   "--cluster SPEC --gpus {} --out FILE.toml` and train FILE.toml",
                   world.local_ranks(), world.size(), world.size());
}

// What rank 0 plans on: a cluster, or (measure) the cache opened to receive the measured one.
struct LocalCluster {
  plan::Cluster cluster;
  bool measure = false;
  OutputFile cache;
  std::string note;  // which cluster, for the line printed once the plan is made
};

plan::Cluster read_cache(const std::string& path) {
  try {
    return plan::read_cluster(path);
  } catch (const InputError& e) {
    throw InputError(fmt::format("parallel.auto's cached cluster: {}; hint: delete {} and `loom train` measures "
                                 "this machine again",
                                 e.what(), path));
  }
}

// Rank 0: the cache when it describes a job of `ranks` ranks (any cache for one rank, which plans
// no links), else the cache opened to be measured into; one rank without a cache cannot measure
// (measure_cluster times links between ranks) and plans on the shipped local cluster.
LocalCluster find_local_cluster(const std::string& path, int ranks) {
  LocalCluster local;
  std::error_code error;
  const bool cached = std::filesystem::exists(path, error);
  if (cached) {
    local.cluster = read_cache(path);
    local.note = fmt::format("planning on the local cluster cached in {} ({})", path, local.cluster.source);
    if (ranks == 1 || local.cluster.devices_per_node == ranks) return local;
  } else if (ranks == 1) {
    local.cluster = plan::read_cluster("local");
    local.note = fmt::format("no cached cluster in {}, and 1 rank cannot measure this machine's links (2 ranks or "
                             "more measure and cache it): planning on the shipped local cluster ({})",
                             path, local.cluster.source);
    return local;
  }
  local.note = cached ? fmt::format("measured this machine for {} ranks (the cache held {}) and cached it in {}",
                                    ranks, local.cluster.devices_per_node, path)
                      : fmt::format("measured this machine for {} ranks and cached it in {}", ranks, path);
  local.measure = true;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);  // checked just below
  check_output_paths({}, {{path, "parallel.auto's cluster cache"}});
  local.cache = OutputFile(path);
  return local;
}

// Every rank: this machine measured as `loom profile --cluster-out` measures it; rank 0 caches it.
void measure(const Config& config, dist::Communicator& world, LocalCluster& local) {
  const ProfileOptions options{.layers = false};
  const plan::Profile machine = measure_profile(config, world, options);
  plan::Cluster measured = measure_cluster(config, world, options, machine);
  if (world.rank() != 0) return;
  const std::string text = kCacheHeader + plan::to_toml(measured);
  local.cache.write(text);
  local.cache.commit();
  // The numbers as the file holds them (6 digits): this run plans as the runs reading it will.
  local.cluster = plan::cluster_from_toml(text, local.cache.path());
}

// Rank 0: the fastest layout of `config` on the cluster, as the TOML every rank trains; `report`
// gets its two lines.
std::string plan_on_rank0(const Config& config, const LocalCluster& local, int ranks, std::string& report,
                          std::string_view verb = "chose") {
  const plan::PlanResult result = plan::plan_layouts(config, local.cluster, ranks, {.top = 1});
  const plan::StepPrediction& best = result.best.front();
  report = fmt::format("loom: parallel.auto: {}\nloom: parallel.auto {} {}\n", local.note, verb, describe_layout(best));
  return to_toml(plan::apply_layout(config, best.plan.config));
}

// What a preview plans on without measuring: what find_local_cluster would take where it takes a
// cluster (the cache measured for `ranks` ranks, any for one rank; the shipped one for one rank
// without a cache); where it would measure, this machine as the cache (or the shipped local
// cluster) describes it, with `ranks` devices sharing its memory, as a measurement for `ranks`
// would have it.
LocalCluster preview_cluster(const std::string& path, int ranks) {
  LocalCluster local;
  std::error_code error;
  const bool cached = std::filesystem::exists(path, error);
  local.cluster = cached ? read_cache(path) : plan::read_cluster("local");
  if (cached && (ranks == 1 || local.cluster.devices_per_node == ranks)) {
    local.note = fmt::format("planning on the local cluster cached in {} ({})", path, local.cluster.source);
    return local;
  }
  if (ranks == 1) {
    local.note = fmt::format("no cached cluster in {}: planning on the shipped local cluster ({})", path,
                             local.cluster.source);
    return local;
  }
  const auto measured_for = static_cast<double>(local.cluster.devices_per_node);
  local.cluster.memory_bytes = local.cluster.memory_bytes * measured_for / static_cast<double>(ranks);
  local.cluster.devices_per_node = ranks;
  local.cluster.max_nodes = 1;
  local.note = fmt::format("no cluster measured for {} rank{} is cached in {}: planning on {} ({}) for {} rank{} "
                           "(`loom train` measures this machine first, and may choose another layout)",
                           ranks, ranks == 1 ? "" : "s", path, cached ? "the cached cluster" : "the shipped local cluster",
                           local.cluster.source, ranks, ranks == 1 ? "" : "s");
  return local;
}

}  // namespace

std::string local_cluster_cache(const char* xdg_cache_home, const char* home) {
  const std::string xdg = xdg_cache_home != nullptr ? xdg_cache_home : "";
  const std::string user = home != nullptr ? home : "";
  std::filesystem::path dir;
  if (xdg.starts_with('/')) dir = xdg;
  else if (!user.empty()) dir = std::filesystem::path(user) / ".cache";
  LOOM_CHECK_INPUT(!dir.empty(),
                   "parallel.auto caches this machine's cluster in $XDG_CACHE_HOME/loom or $HOME/.cache/loom, but "
                   "neither XDG_CACHE_HOME (an absolute path) nor HOME is set; hint: set XDG_CACHE_HOME to a "
                   "writable directory");
  return (dir / "loom" / "local-cluster.toml").string();
}

AutoLayout choose_layout(const Config& config, dist::Communicator& world, const std::string& cache_path) {
  LocalCluster local;  // rank 0's
  agreed(world, [&] {
    check_one_host(world);
    if (world.rank() == 0) local = find_local_cluster(cache_path, world.size());
  });
  if (from_rank0(world, local.measure ? "measure" : "") == "measure") measure(config, world, local);
  std::string chosen;
  AutoLayout out;
  agreed(world, [&] {
    if (world.rank() == 0) chosen = plan_on_rank0(config, local, world.size(), out.report);
  });
  out.config = parse_config(from_rank0(world, chosen), "parallel.auto's layout");
  return out;
}

AutoLayout preview_layout(const Config& config, int ranks, const std::string& cache_path) {
  const LocalCluster local = preview_cluster(cache_path, ranks);
  AutoLayout out;
  out.config = parse_config(plan_on_rank0(config, local, ranks, out.report, "would choose"), "parallel.auto's layout");
  return out;
}

std::string describe_layout(const plan::StepPrediction& p) {
  const Config& c = p.plan.config;
  const ParallelConfig& q = c.parallel;
  std::string text = fmt::format("dp {} x tp {} x pp {} x sp {}", q.dp, q.tp, q.pp, q.sp);
  if (q.sp > 1) text += fmt::format(" ({})", q.sp_mode.name());
  text += fmt::format(", micro-batch {}", c.train.micro_batch);
  if (q.pp > 1) text += fmt::format(", {}{}", q.schedule, q.chunks > 1 ? fmt::format(" x {} chunks", q.chunks) : "");
  if (q.zero == 1) text += ", ZeRO-1";
  if (q.tp_sequence) text += ", tp_sequence";
  text += c.memory.policy == PolicyMode::Auto       ? ", memory.policy auto"
          : c.memory.recompute == Recompute::Full ? ", recompute full"
                                                  : ", activations kept";
  const double peak = *std::max_element(p.peak_bytes_by_stage.begin(), p.peak_bytes_by_stage.end());
  return text + fmt::format(" (predicted {:.3g} s/step, MFU {:.0f}%, peak {} per rank, on {})", p.step_s, 100 * p.mfu,
                            format_bytes(peak), p.cluster);
}

}  // namespace loom::train
