#pragma once
// NOTE [Cost model]
// Where a plan's times come from, as one value: chosen once by whoever starts the planning (the
// trainer, `loom plan` and `loom simulate`, parallel.auto) and passed to every planner function,
// none of which reads a file or chooses by itself.
//   nominal   a layer's FLOPs at kNominalFlops, the swap tier at kNominalCopyBytesPerS (a run
//             without memory.profile on this machine);
//   profiled  the layer times and copy rates `loom profile` measured (memory.profile), checked
//             against the config and its chain when a plan uses them;
//   cluster   a cluster file's model (NOTE [Cluster cost model]): a layer's compute on its device,
//             its collectives priced by the links their groups span. A plan on a cluster is for
//             that cluster: its stage boundaries cost a send there, and the message-tag limit of
//             this build's executor does not apply. A profile's layer times win over the model's.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/plan/cluster.h"
#include "loom/plan/profile.h"

namespace loom::plan {

struct LayerPlan;  // plan/run_plan.h

class CostModel {
 public:
  CostModel() = default;  // nominal, on this machine
  // The costs `config` asks for on `cluster` (null: this machine): memory.profile's measurements
  // when it is set (the file is read here: InputError when it cannot be), else the cluster's
  // model, else nominal. The cluster must outlive the value.
  static CostModel for_config(const Config& config, const Cluster* cluster = nullptr);
  // Measured layer times from `profile` (read from `path`, named in errors) on `cluster`.
  static CostModel profiled(Profile profile, std::string path, const Cluster* cluster = nullptr);

  const Cluster* cluster() const { return cluster_; }  // null: this machine
  bool profiled() const { return profile_.has_value(); }
  // The intra-op threads the profile was measured with (0: no profile).
  int64_t profile_threads() const { return profile_ ? profile_->threads : 0; }
  // Each layer's pass times of `chain`, the chain of `config` (one micro-batch on one rank);
  // returns the swap tier's bandwidth in bytes per second. A profile must belong to `config` and
  // the chain (InputError naming the key or layer otherwise).
  double time(const Config& config, std::vector<LayerPlan>& chain) const;

 private:
  const Cluster* cluster_ = nullptr;
  std::optional<Profile> profile_;
  std::string profile_path_;
};

}  // namespace loom::plan
