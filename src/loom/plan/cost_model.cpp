#include "loom/plan/cost_model.h"

#include <algorithm>

#include "loom/plan/run_plan.h"

namespace loom::plan {

CostModel CostModel::for_config(const Config& config, const Cluster* cluster) {
  if (!config.memory.profile.empty())
    return profiled(read_profile_file(config.memory.profile), config.memory.profile, cluster);
  CostModel out;
  out.cluster_ = cluster;
  return out;
}

CostModel CostModel::profiled(Profile profile, std::string path, const Cluster* cluster) {
  CostModel out;
  out.cluster_ = cluster;
  out.profile_ = std::move(profile);
  out.profile_path_ = std::move(path);
  return out;
}

double CostModel::time(const Config& config, std::vector<LayerPlan>& chain) const {
  if (profile_) {
    std::vector<std::string> names;
    for (const LayerPlan& l : chain) names.push_back(l.name);
    check_profile(*profile_, config, names, profile_path_);
    for (size_t i = 0; i < chain.size(); ++i) {
      chain[i].forward_s = profile_->layers[i].forward_s;
      chain[i].backward_input_s = profile_->layers[i].backward_input_s;
      chain[i].backward_weight_s = profile_->layers[i].backward_weight_s;
    }
    return std::min(profile_->device_to_host_bytes_per_s, profile_->host_to_device_bytes_per_s);
  }
  if (cluster_ != nullptr) {
    const dist::MeshShape mesh = dist::mesh_shape(config.parallel);
    for (LayerPlan& l : chain) {
      const PassTimes t = pass_times(*cluster_, l.cost, config.model.dtype, mesh, static_cast<int>(config.parallel.ep));
      l.forward_s = t.forward_s, l.backward_input_s = t.backward_input_s, l.backward_weight_s = t.backward_weight_s;
    }
    return cluster_->host_bytes_per_s;
  }
  for (LayerPlan& l : chain) {
    l.forward_s = l.cost.forward_flops / kNominalFlops;
    l.backward_input_s = l.cost.backward_input_flops / kNominalFlops;
    l.backward_weight_s = l.cost.backward_weight_flops / kNominalFlops;
  }
  return kNominalCopyBytesPerS;
}

}  // namespace loom::plan
