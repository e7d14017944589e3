#pragma once
// NOTE [parallel.auto]: `loom train` with parallel.auto = true runs the layout `loom plan` would
// choose for the job's world size on the `local` cluster (this machine):
//   cluster  rank 0 reads the cache ($XDG_CACHE_HOME/loom/local-cluster.toml). With none, or one
//            NOTE [Cached cluster] refuses (another rank or thread count, too old), every rank takes
//            part in measure_cluster (as `loom profile --cluster-out`, with the run's threads per
//            rank) and rank 0 caches the result atomically. measure_cluster times the links between
//            ranks, so a 1-rank job cannot measure: it plans on the cache when there is one, else
//            on the shipped clusters/local.toml (plan::read_cluster("local")); with one rank only
//            the micro-batch and the memory mode are chosen, and those depend on compute and
//            memory, which any cluster of this machine describes
//   plan     rank 0 alone runs plan_layouts (top 1) and sends the chosen config as TOML: every
//            rank trains the same layout whatever their floating point does, and a refusal on
//            rank 0 (nothing fits) ends every rank with its message (agree_on_input)
//   result   the user's config with the layout keys of the plan (plan::apply_layout) and parallel.auto
//            false: the trainer then checks and runs it as any written layout
// Every phase that can refuse input is agreed over the world before the next collective, so a
// refusal on one rank never leaves another waiting.
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/plan/simulate.h"

namespace loom::train {

// What choose_layout returns on every rank.
struct AutoLayout {
  Config config;       // the user's config with the chosen layout (plan::apply_layout)
  std::string report;  // rank 0: two lines, the cluster planned on and the layout chosen; else ""
  std::vector<std::string> warnings;  // rank 0: NOTE [Cached cluster]'s, each one `loom: warning:` line's text
};

// NOTE [Cached cluster]: the cache is a measurement, and a measurement goes stale or is taken on a
// busy machine (one cached 49.5 GFLOP/s against the shipped 156, and was planned on until deleted).
// Its [measured] table says when and how it was measured (plan::Measurement). Rank 0 judges it:
//   measure again  when it was measured for another rank count (2 ranks or more), with other
//                  threads per rank than the run's (run_threads), more than kCacheMaxAgeDays ago,
//                  or records no [measured] (an older loom's); one rank cannot measure: it plans on
//                  the cache anyway
//   warn           of each of those; and of any cluster it plans on that was measured here (cached
//                  or just measured): a float32 peak per thread below kImplausiblePeakShare of the
//                  shipped clusters/local.toml's (a busy machine, or one slower than that file's),
//                  repeats of the peak spread more than kUnstablePeakSpread, or a clamped GEMM
//                  curve (gemm_max = 1: thin GEMMs ran as fast as the square ones that set the
//                  peak, so the peak was measured low)
// A warning names the values and how to measure again (the cache's path to delete, or the `loom
// profile --cluster-out` line that writes it). judge_cache and measurement_warnings decide from
// values alone: no clock, no file, no timing, so the tests give them hand-made caches.
inline constexpr double kCacheMaxAgeDays = 7;
inline constexpr double kImplausiblePeakShare = 0.5;
inline constexpr double kUnstablePeakSpread = 0.1;

// The run a cache is judged for.
struct CacheRun {
  int64_t ranks = 1, threads = 1;  // the job's ranks; intra-op threads per rank (run_threads)
  int64_t now_unix = 0;            // seconds since 1970-01-01 UTC
};

struct CacheVerdict {
  bool remeasure = false;
  std::vector<std::string> warnings;  // why, one line's text; empty when the cache is used as it is
};

// NOTE [Cached cluster]'s first part for `cached`, read from `path`.
CacheVerdict judge_cache(const plan::Cluster& cached, const CacheRun& run, const std::string& path);

// NOTE [Cached cluster]'s second part: `measured` (cached in `path`) against `shipped` (the
// shipped clusters/local.toml; nullptr where it cannot be read: the peak is then not compared).
std::vector<std::string> measurement_warnings(const plan::Cluster& measured, const plan::Cluster* shipped,
                                              const std::string& path);

// $XDG_CACHE_HOME/loom/local-cluster.toml, else $HOME/.cache/loom/local-cluster.toml (unset or
// empty variables are skipped; XDG ignores a relative XDG_CACHE_HOME). InputError when neither
// gives a directory.
std::string local_cluster_cache(const char* xdg_cache_home, const char* home);

// The layout for `config` (parallel.auto = true) on world's ranks, the local cluster cached in
// `cache_path` (local_cluster_cache). Collective over `world`: every rank calls it with the same
// config and gets the same layout. InputError (agreed) when the ranks are not all on this host,
// the cache is malformed or cannot be written, or no layout fits. The report is for the caller
// to print once its own checks of the chosen config passed (a refused run prints only its error).
// `kinds`: what model.kind may name (a program's own kinds too: NOTE [Model kinds are a value]).
AutoLayout choose_layout(const Config& config, dist::Communicator& world, const std::string& cache_path,
                         const models::ModelKinds& kinds = models::ModelKinds::builtin());

// `loom config` with parallel.auto = true: the layout choose_layout would pick for `ranks` ranks on
// this host, planned in this process alone. It measures nothing (timing the links takes the job's
// ranks): it plans on the cache when that was measured for `ranks` ranks, else on the cached or
// shipped local cluster with `ranks` devices sharing this host's memory, and its report says which
// ("would choose"). InputError when no layout fits, as choose_layout.
AutoLayout preview_layout(const Config& config, int ranks, const std::string& cache_path,
                          const models::ModelKinds& kinds = models::ModelKinds::builtin());


// "dp 2 x tp 1 x pp 1 x sp 1, micro-batch 4, 1f1b, keep activations (predicted 0.12 s/step on
// local)": what the chosen layout line says after "loom: parallel.auto chose ".
std::string describe_layout(const plan::StepPrediction& prediction);

}  // namespace loom::train
