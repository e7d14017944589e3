#include "loom/train/auto_layout.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <optional>
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
  bool shipped = false;  // the shipped clusters/local.toml: the reference, not judged
  std::string path;      // the cache's
  OutputFile cache;
  std::string note;  // which cluster, for the line printed once the plan is made
  std::vector<std::string> warnings;  // NOTE [Cached cluster]
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

// Rank 0: the cache when NOTE [Cached cluster] keeps it (any cache for one rank, which cannot
// measure), else the cache opened to be measured into; one rank without a cache cannot measure
// (measure_cluster times links between ranks) and plans on the shipped local cluster.
LocalCluster find_local_cluster(const std::string& path, const CacheRun& run) {
  LocalCluster local;
  local.path = path;
  std::error_code error;
  const bool cached = std::filesystem::exists(path, error);
  if (cached) {
    local.cluster = read_cache(path);
    local.note = fmt::format("planning on the local cluster cached in {} ({})", path, local.cluster.source);
    CacheVerdict verdict = judge_cache(local.cluster, run, path);
    local.warnings = std::move(verdict.warnings);
    if (!verdict.remeasure) return local;
  } else if (run.ranks == 1) {
    local.cluster = plan::read_cluster("local");
    local.shipped = true;
    local.note = fmt::format("no cached cluster in {}, and 1 rank cannot measure this machine's links (2 ranks or "
                             "more measure and cache it): planning on the shipped local cluster ({})",
                             path, local.cluster.source);
    return local;
  }
  local.note = cached ? fmt::format("measured this machine again for {} ranks x {} threads and cached it in {}",
                                    run.ranks, run.threads, path)
                      : fmt::format("measured this machine for {} ranks and cached it in {}", run.ranks, path);
  local.measure = true;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);  // checked just below
  check_output_paths({}, {{path, "parallel.auto's cluster cache"}});
  local.cache = OutputFile(path);
  return local;
}

// Every rank: this machine measured as `loom profile --cluster-out` measures it, a device with the
// run's threads (NOTE [Cached cluster]); rank 0 caches it.
void measure(const Config& config, dist::Communicator& world, LocalCluster& local) {
  const ProfileOptions options{.layers = false, .cluster_threads = run_threads(config, world)};
  const plan::Profile machine = measure_profile(config, world, options);
  plan::Cluster measured = measure_cluster(config, world, options, machine);
  if (world.rank() != 0) return;
  const std::string text = kCacheHeader + plan::to_toml(measured);
  local.cache.write(text);
  local.cache.commit();
  // The numbers as the file holds them (6 digits): this run plans as the runs reading it will.
  local.cluster = plan::cluster_from_toml(text, local.cache.path());
}

// The shipped clusters/local.toml, which a measurement is judged against (none where it cannot be read).
std::optional<plan::Cluster> shipped_local() {
  try {
    return plan::read_cluster("local");
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// Rank 0: the fastest layout of `config` on the cluster, as the TOML every rank trains; `out` gets
// the report's two lines and the warnings.
std::string plan_on_rank0(const Config& config, const LocalCluster& local, int ranks, AutoLayout& out,
                          const models::ModelKinds& kinds, std::string_view verb = "chose") {
  out.warnings = local.warnings;
  if (!local.shipped) {
    const std::optional<plan::Cluster> shipped = shipped_local();
    for (std::string& w : measurement_warnings(local.cluster, shipped ? &*shipped : nullptr, local.path))
      out.warnings.push_back(std::move(w));
  }
  const plan::PlanResult result = plan::plan_layouts(config, local.cluster, ranks, {.top = 1}, kinds);
  const plan::StepPrediction& best = result.best.front();
  out.report =
      fmt::format("loom: parallel.auto: {}\nloom: parallel.auto {} {}\n", local.note, verb, describe_layout(best));
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
  local.path = path;
  local.shipped = !cached;
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

AutoLayout choose_layout(const Config& config, dist::Communicator& world, const std::string& cache_path,
                         const models::ModelKinds& kinds) {
  LocalCluster local;  // rank 0's
  agreed(world, [&] {
    check_one_host(world);
    const CacheRun run{.ranks = world.size(), .threads = run_threads(config, world),
                       .now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch()).count()};
    if (world.rank() == 0) local = find_local_cluster(cache_path, run);
  });
  if (from_rank0(world, local.measure ? "measure" : "") == "measure") measure(config, world, local);
  std::string chosen;
  AutoLayout out;
  agreed(world, [&] {
    if (world.rank() == 0) chosen = plan_on_rank0(config, local, world.size(), out, kinds);
  });
  out.config = parse_config(from_rank0(world, chosen), "parallel.auto's layout");
  return out;
}

AutoLayout preview_layout(const Config& config, int ranks, const std::string& cache_path,
                          const models::ModelKinds& kinds) {
  const LocalCluster local = preview_cluster(cache_path, ranks);
  AutoLayout out;
  out.config = parse_config(plan_on_rank0(config, local, ranks, out, kinds, "would choose"), "parallel.auto's layout");
  return out;
}

CacheVerdict judge_cache(const plan::Cluster& cached, const CacheRun& run, const std::string& path) {
  std::vector<std::string> reasons;
  if (run.ranks > 1 && cached.devices_per_node != run.ranks)
    reasons.push_back(fmt::format("measured for {} ranks, the run has {}", cached.devices_per_node, run.ranks));
  if (!cached.measured) {
    reasons.emplace_back("it does not say when or how it was measured (no [measured]: an older loom's)");
  } else {
    const plan::Measurement& m = *cached.measured;
    if (m.threads != run.threads)
      reasons.push_back(fmt::format("measured with {} threads per rank, the run uses {}", m.threads, run.threads));
    const double days = static_cast<double>(run.now_unix - m.unix_time) / 86400;
    if (days > kCacheMaxAgeDays)
      reasons.push_back(fmt::format("measured {:.0f} days ago, more than {:g}", days, kCacheMaxAgeDays));
  }
  CacheVerdict verdict;
  if (reasons.empty()) return verdict;
  std::string why;
  for (const std::string& r : reasons) why += (why.empty() ? "" : "; ") + r;
  verdict.remeasure = run.ranks > 1;
  verdict.warnings.push_back(
      verdict.remeasure
          ? fmt::format("parallel.auto's cached cluster {} is stale ({}): measuring this machine again for {} ranks "
                        "x {} threads",
                        path, why, run.ranks, run.threads)
          : fmt::format("parallel.auto's cached cluster {} is stale ({}), and 1 rank cannot measure this machine's "
                        "links: planning on it anyway; hint: run parallel.auto on 2 ranks or more once to measure it "
                        "again, or delete {} to plan on the shipped clusters/local.toml",
                        path, why, path));
  return verdict;
}

std::vector<std::string> measurement_warnings(const plan::Cluster& measured, const plan::Cluster* shipped,
                                              const std::string& path) {
  const plan::Measurement how = measured.measured.value_or(plan::Measurement{});
  const std::string again = fmt::format(
      "hint: measure again on a quiet machine: delete {} and run parallel.auto on {} ranks, or `mpiexec -n {} loom "
      "profile -c CONFIG --set train.threads={} --cluster-out {}`",
      path, std::max<int64_t>(2, how.ranks), std::max<int64_t>(2, how.ranks), how.threads, path);
  const std::string what = fmt::format("parallel.auto's cluster {}", path);
  std::vector<std::string> out;
  const auto mine = measured.peak_flops.find(DType::Float32);
  if (shipped != nullptr && mine != measured.peak_flops.end() && shipped->peak_flops.count(DType::Float32) != 0) {
    const double per_thread = mine->second / static_cast<double>(how.threads);
    const double reference = shipped->peak_flops.at(DType::Float32) /
                             static_cast<double>(shipped->measured.value_or(plan::Measurement{}).threads);
    if (per_thread < kImplausiblePeakShare * reference)
      out.push_back(fmt::format(
          "{}: its float32 GEMM peak, {:.1f} GFLOP/s per thread, is below {:.0f}% of the shipped "
          "clusters/local.toml's {:.1f} ({}): the machine was busy while it measured, or is slower than that one, "
          "and predicted steps and MFU are off by as much; {}",
          what, per_thread / 1e9, 100 * kImplausiblePeakShare, reference / 1e9, shipped->source, again));
  }
  if (how.peak_spread > kUnstablePeakSpread)
    out.push_back(fmt::format("{}: its float32 GEMM peak's repeats spread {:.0f}% (more than {:.0f}%): the machine "
                              "was busy while it measured; {}",
                              what, 100 * how.peak_spread, 100 * kUnstablePeakSpread, again));
  if (measured.gemm_max >= 1)
    out.push_back(fmt::format("{}: its GEMM curve is clamped (gemm_max = 1: thin GEMMs ran as fast as the square "
                              "ones that set the peak), so the peak was measured low; {}",
                              what, again));
  return out;
}

std::string describe_layout(const plan::StepPrediction& p) {
  const Config& c = p.plan.config;
  const ParallelConfig& q = c.parallel;
  std::string text = fmt::format("dp {} x tp {} x pp {} x sp {}", q.dp, q.tp, q.pp, q.sp);
  if (q.sp > 1) text += fmt::format(" ({})", q.sp_mode.name());
  text += fmt::format(", micro-batch {}", c.train.micro_batch);
  if (q.pp > 1) text += fmt::format(", {}{}", q.schedule, q.chunks > 1 ? fmt::format(" x {} chunks", q.chunks) : "");
  if (q.zero > 0) text += fmt::format(", ZeRO-{}", q.zero);
  if (q.shard_group > 0 && q.shard_group < q.dp) text += fmt::format(" in groups of {} dp ranks", q.shard_group);
  if (q.tp_sequence) text += ", tp_sequence";
  text += c.memory.policy == PolicyMode::Auto       ? ", memory.policy auto"
          : c.memory.recompute == Recompute::Full ? ", recompute full"
                                                  : ", activations kept";
  const double peak = p.largest_peak();
  return text + fmt::format(" (predicted {:.3g} s/step, MFU {:.0f}%, peak {} per rank, on {})", p.step_s, 100 * p.mfu,
                            format_bytes(peak), p.cluster);
}

}  // namespace loom::train
