#pragma once
// NOTE [Run plan]
// Everything a run decides before it allocates, as one value computed from the config and the
// world size alone: no MPI, no parameter allocated (the layers are built against a sizing
// communicator for their shapes and costs). The trainer executes a plan; the input checks run on
// it; `loom config --print --ranks N` prints it; a planner can enumerate plans and compare them.
//   ranks     every rank's mesh coordinates (dist::mesh_coords)
//   chain     each layer of the model: name, analytic cost of one micro-batch on one rank (its tp
//             shard and sp segment), its parameters, and its memory policy
//   cuts      the chain's slices, one per virtual stage (pp x chunks)
//   schedule  every pipeline rank's actions
//   stages    per pipeline rank: its slices, the micro-batches it holds at once (simulated), and
//             its memory estimate by category
//   comm      bytes a rank hands to the collectives of each mesh axis in one step
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/core/config.h"
#include "loom/dist/mesh.h"
#include "loom/models/registry.h"
#include "loom/nn/layer.h"
#include "loom/nn/memory_policy.h"
#include "loom/plan/cluster.h"
#include "loom/plan/cost_model.h"
#include "loom/plan/memory_model.h"
#include "loom/schedule/schedule.h"

namespace loom::plan {

struct ParamInfo {
  int64_t numel = 0;      // this rank's part
  int64_t row_width = 0;  // for a table: its row width
  bool table = false;     // on the sparse path (an embedding under parallel.sparse = "on", or "auto" over replicas)
  bool expert = false;    // sharded over ep: outside ZeRO's buffers (NOTE [Experts beside ZeRO])
  bool routed = false;    // a routed expert's weights (nn::Param::expert), whatever the layout
  bool sliceable = false; // read in row slices under ZeRO-3 (NOTE [Sliced reads])
};

struct LayerPlan {
  std::string name;
  nn::Cost cost;  // one micro-batch on one rank
  // Seconds of one micro-batch on one rank, from the plan's cost model (NOTE [Cost model]).
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
  std::vector<ParamInfo> params;
  nn::MemoryPolicy policy = nn::MemoryPolicy::Keep;
};

// A layer's dense parameter elements on one rank (its tables on the sparse path and its experts
// sharded over ep left out), and those experts' elements.
double dense_numel(const LayerPlan& layer);
double expert_numel(const LayerPlan& layer);

// Bytes per rank. `weights`: parameters, their gradients and AdamW moments (dense); `activations`:
// the saved activations of the micro-batches a stage holds at once; `sparse`: a table's owned
// rows, their moments and the rows pulled in a step; `transient`: the busiest layer's moment
// beyond those (a recomputing layer's saved state rebuilt before its backward and its backward's
// gradients of it, plus its temporaries, nn::Cost::workspace_bytes).
struct MemoryEstimate {
  double weights = 0, activations = 0, sparse = 0, transient = 0;
  // The weights' parts: the dense parameters' values (with their compute copy), gradients and
  // AdamW moments this rank keeps between steps.
  double params = 0, grads = 0, moments = 0;
  // The stage boundaries' messages held at the peak beyond the activations: outputs and input
  // gradients sent, output gradients received (NOTE [Stage boundaries in the replay]).
  double boundary = 0;
  // checkpoint.async: the copy of the state this rank writes (its share of the stage's weights
  // and moments over the replicas, and its sparse rows), held while the save is written.
  double checkpoint = 0;
  // ZeRO-2/3 (NOTE [Fully sharded data parallelism]): the largest layer's working set, held only
  // while it runs: its gathered values (and their compute copy) under ZeRO-3 with the next layer's
  // prefetched, and the gradient buffers of one micro-batch until they are reduce-scattered.
  double gathered = 0;
  int64_t stashed = 1;  // micro-batches held at once (the schedule's peak)
  // The swap tier's peak (host memory; not in the budget, not in total()).
  double host = 0;
  double total() const { return weights + activations + boundary + sparse + transient + checkpoint + gathered; }
};

struct StagePlan {
  std::vector<int64_t> virtual_stages;  // chunk c's: the schedule's virtual_stage(rank, c) (a V's too)
  std::vector<int64_t> layers;          // its chain indices, in chunk order
  MemoryEstimate memory;
  // Bytes a rank of this stage hands to collectives and sends per step, by group
  // (plan/comm_volume.cpp): the replicas' gradient reduction ("dp", or "dp_sp" with sp > 1; ZeRO-1
  // adds the parameter all-gather; ZeRO-2/3 its reduce-scatters and gathers, "dp_shard" and
  // "dp_across" where the shard group is smaller than the replicas), the experts' all-to-alls
  // ("ep") and their gradients' all-reduce ("edp"), and the stage boundaries ("pp"). Scalars (loss,
  // norms) and the sparse path's row exchange, which depends on the data, are not counted; tp and
  // sp traffic comes next.
  std::map<std::string, double> comm_bytes;
};

struct RunPlan {
  Config config;
  // model.kind, from the registry make_plan was given (which must outlive the plan; the trainer
  // keeps its own copy of it).
  const models::ModelKind* kind = nullptr;
  int world_size = 1;
  dist::MeshShape mesh;
  std::vector<LayerPlan> chain;
  std::vector<int64_t> cuts;  // pp x chunks + 1 boundaries: virtual stage v is [cuts[v], cuts[v + 1])
  schedule::Schedule schedule;
  std::vector<StagePlan> stages;                 // per pipeline rank
  int64_t local_tokens = 0;                      // tokens of each sequence a rank's layers see
  double predicted_step_s = 0;                   // the pipeline's simulated step (NOTE [Memory cost model])
  Prediction prediction;                         // the memory cost model's, for the chosen cuts and policies
  double copy_bytes_per_s = 0;                   // the swap tier's bandwidth the plan assumed
  double p2p_s = 0;                              // a stage boundary's send (on a cluster)
  bool profiled = false;                         // times measured by `loom profile` (else analytic)
  int64_t profile_threads = 0;                   // the intra-op threads the profile was measured with (0: none)
  const Cluster* cluster = nullptr;              // a plan for this cluster (NOTE [Cost model]); null: this machine
  // Under parallel.sparse = "auto", whether the run fits with every embedding table dense, so that
  // auto may choose dense (NOTE [Table paths]); set with the memory check (dense_tables_fit).
  bool dense_tables_fit = true;

  dist::MeshCoords coords(int rank) const { return dist::mesh_coords(mesh, rank); }
  const StagePlan& stage_of(int rank) const { return stages[static_cast<size_t>(coords(rank).pp)]; }
  std::string describe() const;  // the text `loom config --print --ranks N` prints
  nlohmann::json to_json() const;
};

// Without a profile, a layer's seconds are its FLOPs at this rate and the swap tier copies at
// kNominalCopyBytesPerS: one core of a current server CPU (docs/memory.md). Only their ratios
// steer the choices; `loom profile` measures both.
inline constexpr double kNominalFlops = 1e11;
inline constexpr double kNominalCopyBytesPerS = 5e9;
// memory.policy = "auto" and parallel.partition = "auto" fit each stage's estimate into this share
// of memory.budget: the rest is for what the estimate leaves out (small tensors: norm statistics,
// masks, scalars; timing: a message taken later than simulated). Issue 33 measured kept stages
// 8-15% above the estimate before it counted the backward's temporaries and the stage boundaries'
// messages (NOTE [Backward moments], NOTE [Stage boundaries in the replay]); with them, projected
// from the same runs, -7% to +5%. tests/dist/test_memory_policy.cpp (AutoPlanBudget) holds every
// stage's measured peak within the budget and within this share of its estimate.
inline constexpr double kPlannedBudgetShare = 0.9;

// Throws InputError (naming the keys) for a config that passed models::validate_config but whose
// layout cannot run on `world_size` ranks: stages against the chain, the schedule, message tags,
// explicit cuts, the mesh against the world.
// The layers' times and the swap tier's bandwidth come from `costs` (NOTE [Cost model]); on a
// cluster the stages' boundaries cost a send, and the message-tag limit of this build's executor
// is not checked (the plan is for that cluster).
RunPlan make_plan(const Config& config, int world_size, const CostModel& costs,
                  const models::ModelKinds& kinds = models::ModelKinds::builtin());

// The chain of `config` (tp rank 0's shard, one micro-batch), each layer timed by `costs`: what a
// planner's bounds need, without a schedule.
std::vector<LayerPlan> timed_chain(const Config& config, const CostModel& costs,
                                   const models::ModelKinds& kinds = models::ModelKinds::builtin());

// A layer's pass times on `cluster` (forward, backward input, backward weight), its collectives
// priced by the links their groups span in `mesh`.
struct PassTimes {
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
};
PassTimes pass_times(const Cluster& cluster, const nn::Cost& cost, DType dtype, const dist::MeshShape& mesh, int ep = 1);

// The memory a rank's tensors live in, shared evenly by `sharers` ranks: this machine's, shared by
// the job's ranks on it, or a GPU's, shared by the ranks placed on it (NOTE [Devices]).
struct RankMemory {
  double bytes = 0;
  int sharers = 1;
  std::string where = "this machine";  // "this machine", "GPU 0"
};
RankMemory host_rank_memory(int local_ranks);

// Every stage's estimate against memory.budget (besides `in_use` bytes already allocated), or
// without a budget against `memory`'s share per rank. InputError otherwise.
void check_memory(const RunPlan& plan, const RankMemory& memory, double in_use);

// Whether `plan`'s run with every embedding table dense (parallel.sparse = "off") passes
// check_memory; a plan with no table on the sparse path is that run already, and `plan` is assumed
// to have passed it. `costs` and `kinds`: what `plan` was made with.
bool dense_tables_fit(const RunPlan& plan, const RankMemory& memory, double in_use, const CostModel& costs,
                      const models::ModelKinds& kinds = models::ModelKinds::builtin());

// How many of a stage's layers the plan recomputes and swaps (the rest keep their activations).
struct PolicyCounts {
  int64_t recomputed = 0, swapped = 0;
};
PolicyCounts policy_counts(const RunPlan& plan, const StagePlan& stage);

// The estimate's parts and the keys that size them, for messages.
std::string memory_text(const RunPlan& plan, const MemoryEstimate& need);

// The remedies a memory error names after "hint: " (check_memory's, and the accounting
// allocator's once the trainer has set it): under memory.policy = "auto" the plan chose the
// policies, so the hint names memory.policy and the keys that size what it fitted, never
// memory.recompute (which "auto" refuses beside it); under memory.recompute = "full" neither does
// it suggest that again (docs/benchmarks.md's refusal did); otherwise the model kind's own.
std::string budget_hint(const RunPlan& plan);

}  // namespace loom::plan
