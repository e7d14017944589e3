#pragma once
// NOTE [parallel.auto]: `loom train` with parallel.auto = true runs the layout `loom plan` would
// choose for the job's world size on the `local` cluster (this machine):
//   cluster  rank 0 reads the cache ($XDG_CACHE_HOME/loom/local-cluster.toml). With none, or one
//            measured for another number of ranks (its devices per node and memory per device are
//            the job's), every rank takes part in measure_cluster (as `loom profile --cluster-out`)
//            and rank 0 caches the result atomically. measure_cluster times the links between
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
#include <string>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/plan/simulate.h"

namespace loom::train {

// What choose_layout returns on every rank.
struct AutoLayout {
  Config config;       // the user's config with the chosen layout (plan::apply_layout)
  std::string report;  // rank 0: two lines, the cluster planned on and the layout chosen; else ""
};

// $XDG_CACHE_HOME/loom/local-cluster.toml, else $HOME/.cache/loom/local-cluster.toml (unset or
// empty variables are skipped; XDG ignores a relative XDG_CACHE_HOME). InputError when neither
// gives a directory.
std::string local_cluster_cache(const char* xdg_cache_home, const char* home);

// The layout for `config` (parallel.auto = true) on world's ranks, the local cluster cached in
// `cache_path` (local_cluster_cache). Collective over `world`: every rank calls it with the same
// config and gets the same layout. InputError (agreed) when the ranks are not all on this host,
// the cache is malformed or cannot be written, or no layout fits. The report is for the caller
// to print once its own checks of the chosen config passed (a refused run prints only its error).
AutoLayout choose_layout(const Config& config, dist::Communicator& world, const std::string& cache_path);

// `loom config` with parallel.auto = true: the layout choose_layout would pick for `ranks` ranks on
// this host, planned in this process alone. It measures nothing (timing the links takes the job's
// ranks): it plans on the cache when that was measured for `ranks` ranks, else on the cached or
// shipped local cluster with `ranks` devices sharing this host's memory, and its report says which
// ("would choose"). InputError when no layout fits, as choose_layout.
AutoLayout preview_layout(const Config& config, int ranks, const std::string& cache_path);


// "dp 2 x tp 1 x pp 1 x sp 1, micro-batch 4, 1f1b, keep activations (predicted 0.12 s/step on
// local)": what the chosen layout line says after "loom: parallel.auto chose ".
std::string describe_layout(const plan::StepPrediction& prediction);

}  // namespace loom::train
