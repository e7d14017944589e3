#include "loom/plan/comm_volume.h"

#include "loom/plan/element_bytes.h"
#include "loom/plan/working_set.h"

namespace loom::plan {

std::map<std::string, double> comm_volume(const RunPlan& plan, int64_t pp_rank, const std::vector<int64_t>& layers) {
  const Config& c = plan.config;
  const auto& p = c.parallel;
  const int64_t bytes = activation_bytes(c.model), replicas = p.dp * p.sp;
  const int64_t grad_bytes = grad_wire_bytes(c);
  std::map<std::string, double> comm;
  if (replicas > 1 && p.zero >= 2) {
    // Per local micro-batch each layer's vector (padded to the group) is reduce-scattered; ZeRO-3
    // gathers it before its forward and its backward, ZeRO-2 once after the update. Hybrid groups
    // all-reduce the owned sums across (NOTE [Fully sharded data parallelism]).
    const int64_t group = shard_ways(p), across = replicas / group, m = plan.schedule.microbatches;
    int64_t padded = 0;
    for (int64_t i : layers) {
      const auto mine = static_cast<int64_t>(dense_numel(plan.chain[i]));
      padded += (mine + group - 1) / group * group;
    }
    const int64_t owned = padded / group, master = master_bytes(c.model);
    comm[across > 1 ? "dp_shard" : p.sp > 1 ? "dp_sp" : "dp"] =
        static_cast<double>(m * padded * grad_bytes + (p.zero == 3 ? 2 * m : 1) * owned * master);
    if (across > 1) comm["dp_across"] = static_cast<double>(owned * master);
  } else if (replicas > 1) {
    int64_t dense = 0;
    for (int64_t i : layers) dense += static_cast<int64_t>(dense_numel(plan.chain[i]));
    const int64_t padded = (dense + replicas - 1) / replicas * replicas;  // FlatParams pads to the group
    comm[p.sp > 1 ? "dp_sp" : "dp"] =
        static_cast<double>(padded * grad_bytes + (p.zero == 1 ? padded / replicas * master_bytes(c.model) : 0));
  }
  // NOTE [Expert parallelism]: each micro-batch's counts and rows out and back, in every forward
  // (a recomputed layer's twice) and backward; once a step, the experts' squares of the gradient
  // norm (one float64).
  double ep = 0;
  for (int64_t i : layers) {
    const LayerPlan& l = plan.chain[i];
    for (const nn::CommUse& u : l.cost.comm) {
      if (u.axis != nn::CommAxis::Ep) continue;
      const double forwards = l.policy == nn::MemoryPolicy::Recompute ? 2 : 1;
      ep += static_cast<double>(u.count) * u.bytes * (u.pass == nn::CommPass::Forward ? forwards : 1);
    }
  }
  if (ep > 0) comm["ep"] = ep * static_cast<double>(plan.schedule.microbatches) + 8;
  // NOTE [Experts beside ZeRO]: the experts' gradients, all-reduced over their replicas.
  double experts = 0;
  for (int64_t i : layers) experts += expert_numel(plan.chain[i]);
  if (experts > 0 && replicas / p.ep > 1) comm["edp"] = experts * static_cast<double>(grad_bytes);
  if (p.pp > 1) {  // per micro-batch, each slice sends its output forward and its input gradient back
    const int64_t shards = p.tp_sequence ? p.tp : 1;
    const int64_t boundary = c.train.micro_batch * plan.local_tokens / shards * c.model.d_model * bytes;
    int64_t sends = 0;  // to other ranks: the V's turn is a hand-off within the rank
    const schedule::Schedule& s = plan.schedule;
    for (int64_t chunk = 0; chunk < s.chunks; ++chunk) {
      const int64_t v = s.virtual_stage(pp_rank, chunk), last = s.virtual_stages() - 1;
      sends += (v < last && s.rank_of(v + 1) != pp_rank) + (v > 0 && s.rank_of(v - 1) != pp_rank);
    }
    comm["pp"] = static_cast<double>(sends * plan.schedule.microbatches * boundary);
  }
  return comm;
}

}  // namespace loom::plan
