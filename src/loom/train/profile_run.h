#pragma once
// `loom profile`'s measurement (NOTE [Profile] in plan/profile.h, docs/profile.md): the chain's
// layers at the config's micro-batch shape, the swap tier's copy bandwidth and the collectives'
// alpha / beta on this machine. Collective over the world: every rank calls measure_profile with
// the same config and options.
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/cuda/placement.h"
#include "loom/dist/communicator.h"
#include "loom/dist/device_backend.h"
#include "loom/models/registry.h"
#include "loom/plan/cluster.h"
#include "loom/plan/profile.h"
#include "loom/train/profile_timing.h"

namespace loom::train {

struct ProfileOptions {
  int64_t repeats = 5;  // timed runs of each measurement after one warm-up; the file holds medians
  bool layers = true;   // false: measure_profile leaves the chain out (--cluster-out alone needs none)
  // Intra-op threads a device (one rank) measures measure_cluster's compute with: 1 for `loom
  // profile --cluster-out` (train.threads where set), the run's for parallel.auto's cache.
  int64_t cluster_threads = 1;
  // Where this rank measures (place_profile; the CPU by default) and the backend its device
  // tensors may cross (null: none; MPI through host buffers then, NOTE [Host staging]).
  cuda::Placement placement;
  const dist::DeviceBackend* devices = nullptr;
};

// This rank's device for a profile, as a run of `config` resolves train.device and
// parallel.backend (NOTE [Devices]); InputError when it cannot run here. Loads libtorch's CUDA
// library for a GPU rank.
cuda::Placement place_profile(const Config& config, const dist::Communicator& world, const dist::DeviceBackend* devices);

// The intra-op threads a run of `config` uses on each rank here: train.threads, else this host's
// cores / its ranks (the trainer's default; all the cores for one rank).
int run_threads(const Config& config, const dist::Communicator& world);

// What measure_profile needs of the job: tp x sp ranks measure the chain together (the first
// ones of the world), so the world must have as many. InputError naming the keys otherwise.
void check_profile_input(const Config& config, int world_size, const ProfileOptions& options);
// What measure_cluster needs of the job: hosts of as many ranks each, numbered consecutively
// (`per_host`: dist::ranks_per_host of the job's hosts, 0 where they differ), and on CPUs two
// ranks or more (its links are their send_recv; one GPU alone takes its host link). InputError
// otherwise, naming `counts` (the ranks on each host, host_counts).
void check_cluster_input(int world_size, int per_host, bool gpu, const std::string& counts = "");
// The ranks on each host in the job's order, for that message: "2, 1, 1". `host_of`: dist::hosts_of_ranks.
std::string host_counts(const std::vector<int>& host_of);

// The link between hosts: send_recv between world rank 0 and the first rank of the second host, its
// rate sustained (fit_sustained: the test cluster's shaped links carry 256 KiB of each message at
// once, which the line fit read as twice the rate), complete on those two ranks; and where a host
// holds several ranks, the host's whole link (NOTE [Node link] in plan/cluster.h: every rank of
// the first host sending to its peer on the second at once), complete on every rank. A collective
// over the world, whose hosts hold as many ranks each.
struct HostsLink {
  plan::CollectiveProfile device;
  double node_bytes_per_s = 0;  // 0: one rank per host
};
HostsLink measure_hosts_link(dist::Communicator& world, int64_t repeats, const ProfileDevice& device);

// The whole profile, complete on world rank 0, measured on options.placement's device (NOTE
// [Devices]: each timer stops once the device's queued work has run; the tensors cross the
// communicator a run's would, train/devices.h):
//   layers       the first tp x sp ranks build the chain for their tp and sp groups (tp rank 0's
//                shard, sp rank 0's segment) and run one micro-batch through it, forward then
//                backward (input then weight gradient per layer), timing each call; the others wait
//   copy         rank 0 copies 64 MiB device -> host and back through the device's swap tier
//                (NOTE [Swap tier]: on a GPU pinned blocks and a copy stream)
//   collectives  for each group size g in 2..world size, the first g ranks time each collective
//                at message sizes 4 KiB .. 16 MiB; send_recv between ranks 0 and 1 (g = 2). On
//                several hosts, each host's ranks among themselves: the sizes up to its ranks
// Other ranks return the parts they took no part in empty. `kinds`: what model.kind may name.
plan::Profile measure_profile(const Config& config, dist::Communicator& world, const ProfileOptions& options = {},
                              const models::ModelKinds& kinds = models::ModelKinds::builtin());

// `loom profile --cluster-out` (NOTE [Cluster cost model] in plan/cluster.h): this machine as the
// cluster "local", complete on world rank 0. A device is one rank: on CPUs running
// options.cluster_threads intra-op threads (one for the shipped clusters/local.toml), else its GPU.
//   device       per_node = the ranks on each host, max_nodes = the job's hosts; memory_bytes =
//                this machine's memory / per_node, or the GPU's / the ranks placed on it; kind = cpu or
//                gpu, kernels: elementwise unfused (libtorch's eager kernels), attention fused
//                where the config's kernel ran fused
//   compute      every rank measures at once (a run's ranks share the caches and the memory bus,
//                so a device alone would look faster than it is); rank 0's numbers:
//                peak_flops per dtype = the median of 3 measure_gemm_peak of large square GEMMs
//                (on a CPU bfloat16 only where native; [measured] records the float32 repeats'
//                spread, the time, ranks, threads and loom version); the GEMM curve fitted
//                (fit_gemm_curve) to [2048 x d] x [d x d] for d = 32 .. 1024 in float32 (on a GPU
//                [8192 x d] x [d x d], d = 256 .. 8192); attention = the config's kernel's causal
//                forward + backward (B 2, H 8, T 512, hd 64, model.attn_tile) at 3 x its forward
//                FLOPs over the float32 peak, an unfused kernel's score passes taken out;
//                memory_bandwidth = a 256 MiB float32 add's 3 x 256 MiB per second
//   links        from `machine` (measure_profile's on this world; its layers are not read):
//                intra_node = its send_recv (1 / beta, alpha); inter_node = the same on one host,
//                measure_hosts_link on several (and intra_node too, with one rank per host: a node
//                of one device prices no link within); one GPU alone: its host link (a plan of one
//                device prices no link); host = the slower of its two copies; every collective it
//                measured as a [[collective]] entry
// Collective over the world; check_cluster_input first.
plan::Cluster measure_cluster(const Config& config, dist::Communicator& world, const ProfileOptions& options,
                              const plan::Profile& machine);

// The GEMM efficiency curve e(d) = gemm_max x d / (d + gemm_half_dim) fitted to measured
// efficiencies (achieved / peak) at dims d: 1/e = a + b/d by least squares, gemm_max = 1/a
// clamped to (0, 1], gemm_half_dim = b x gemm_max (so the small-d slope stays the fit's) and >= 0.
// Needs two distinct dims.
struct GemmCurve {
  double gemm_max = 1, gemm_half_dim = 0;
};
GemmCurve fit_gemm_curve(const std::vector<double>& dims, const std::vector<double>& efficiency);

// t = alpha + beta x bytes, fitted to (bytes[i], seconds[i]) by least squares on the relative
// error (each point weighted 1 / seconds[i]^2: unweighted, the largest message's noise would
// swamp the smallest one's whole time and alpha would be noise). alpha is clamped to >= 1e-7 s
// and beta to >= 1e-15 s per byte (a fit through noise can make either negative); beta is then
// refitted for the clamped alpha. Needs two distinct sizes.
struct LineFit {
  double alpha_s = 0, beta_s_per_byte = 0;
};
LineFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);
// A link's sustained rate: the time per byte the two largest messages differ by, which a shaper's
// burst or a switch's buffer (carrying the first bytes of each message at once) cancels out of;
// the latency what the smallest message takes beyond its bytes at that rate (all of its time where
// that is less: a burst carried it). The line fit where the two largest differ by no time (noise).
// `bytes` rising.
LineFit fit_sustained(const std::vector<double>& bytes, const std::vector<double>& seconds);

}  // namespace loom::train
