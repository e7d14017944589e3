#pragma once
// NOTE [Profile]: what `loom profile` measures on this machine for one config, as a versioned
// JSON file (docs/profile.md) that the memory policy and the stage search read (memory.profile)
// and a later planner reuses:
//   layers       per chain layer (tp rank 0's shard, one micro-batch of the config's shape):
//                median forward, backward-input and backward-weight seconds, parameter bytes and
//                the bytes its forward saves (the distinct storages its saved state holds)
//   copy         the swap tier's bandwidth, device -> host and host -> device (memory/swap.h)
//   collectives  alpha (s) and beta (s per byte) of each collective loom uses, per group size
//   identity     the config keys that shape a layer's cost; a file whose identity differs from
//                the run's, or whose version is newer, is refused (InputError naming the key)
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/core/config.h"

namespace loom::plan {

inline constexpr int64_t kProfileVersion = 1;
inline constexpr const char* kProfileFormat = "loom-profile";

struct LayerProfile {
  std::string name;
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;  // medians
  double param_bytes = 0, saved_bytes = 0;
  bool operator==(const LayerProfile&) const = default;
};

// t(bytes) = alpha_s + beta_s_per_byte x bytes for `op` over `ranks` ranks. `bytes` is the whole
// buffer: all_reduce's tensor, all_gather's output, reduce_scatter's input, all_to_all's input,
// send_recv's message (t is one way; ranks = 2).
struct CollectiveProfile {
  std::string op;  // "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"
  int64_t ranks = 2;
  double alpha_s = 0, beta_s_per_byte = 0;
  bool operator==(const CollectiveProfile&) const = default;
};

struct Profile {
  int64_t version = kProfileVersion;
  std::vector<std::pair<std::string, std::string>> identity;  // ("model.d_model", "256"), ...
  std::vector<LayerProfile> layers;                           // in chain order
  double device_to_host_bytes_per_s = 0, host_to_device_bytes_per_s = 0;
  std::vector<CollectiveProfile> collectives;
  int64_t threads = 1;  // intra-op threads the times were measured with
  bool operator==(const Profile&) const = default;
};

// The config keys that shape one layer's measured cost, with their values as the config holds
// them: every model.* key, train.micro_batch, parallel.tp, parallel.sp, parallel.tp_sequence,
// parallel.tp_overlap, parallel.sp_mode (the last two change how a layer's collectives run);
// sorted by key.
std::vector<std::pair<std::string, std::string>> profile_identity(const Config& config);

nlohmann::json to_json(const Profile& profile);
// Parses and checks: format, version (newer than kProfileVersion refused), fields, positive
// times and bandwidths. `where` names the file in errors. InputError otherwise.
Profile profile_from_json(const std::string& text, const std::string& where);
// One warning line's text when memory.profile `path` was measured with other intra-op threads per
// rank than the run uses (its layer times, and the cuts and policies chosen with them, are another
// speed's), naming both counts and how to measure again; "" when they agree or there is no profile
// (profile_threads 0).
std::string profile_threads_warning(const std::string& path, int64_t profile_threads, int64_t run_threads);

// Reads and parses `path` (profile_from_json). InputError when it cannot be read or is not a profile.
Profile read_profile_file(const std::string& path);
// Checks `profile` (read from `where`) belongs to `config`: its identity, then the chain's layer
// count and names against `layer_names`. InputError naming the key and both values otherwise.
void check_profile(const Profile& profile, const Config& config, const std::vector<std::string>& layer_names,
                   const std::string& where);
// read_profile_file, then check_profile.
Profile read_profile(const std::string& path, const Config& config, const std::vector<std::string>& layer_names);

}  // namespace loom::plan
