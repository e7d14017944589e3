#pragma once
// `loom profile`'s measurement (NOTE [Profile] in plan/profile.h, docs/profile.md): the chain's
// layers at the config's micro-batch shape, the swap tier's copy bandwidth and the collectives'
// alpha / beta on this machine. Collective over the world: every rank calls measure_profile with
// the same config and options.
#include <cstdint>
#include <vector>

#include "loom/core/config.h"
#include "loom/dist/communicator.h"
#include "loom/plan/profile.h"

namespace loom::train {

struct ProfileOptions {
  int64_t repeats = 5;  // timed runs of each measurement after one warm-up; the file holds medians
};

// What measure_profile needs of the job: tp x sp ranks measure the chain together (the first
// ones of the world), so the world must have as many. InputError naming the keys otherwise.
void check_profile_input(const Config& config, int world_size, const ProfileOptions& options);

// The whole profile, complete on world rank 0:
//   layers       the first tp x sp ranks build the chain for their tp and sp groups (tp rank 0's
//                shard, sp rank 0's segment) and run one micro-batch through it, forward then
//                backward (input then weight gradient per layer), timing each call; the others wait
//   copy         rank 0 copies 64 MiB device -> host and back through memory::make_host_tier()
//   collectives  for each group size g in 2..world size, the first g ranks time each collective
//                at message sizes 4 KiB .. 16 MiB; send_recv between ranks 0 and 1 (g = 2)
// Other ranks return the parts they took no part in empty.
plan::Profile measure_profile(const Config& config, dist::Communicator& world, const ProfileOptions& options = {});

// t = alpha + beta x bytes, fitted to (bytes[i], seconds[i]) by least squares on the relative
// error (each point weighted 1 / seconds[i]^2: unweighted, the largest message's noise would
// swamp the smallest one's whole time and alpha would be noise). alpha is clamped to >= 1e-7 s
// and beta to >= 1e-15 s per byte (a fit through noise can make either negative); beta is then
// refitted for the clamped alpha. Needs two distinct sizes.
struct LineFit {
  double alpha_s = 0, beta_s_per_byte = 0;
};
LineFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);

}  // namespace loom::train
