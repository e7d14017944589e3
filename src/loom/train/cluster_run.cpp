// `loom profile --cluster-out` (NOTE [Cluster cost model] in plan/cluster.h): this machine as a
// cluster, its devices the ranks' CPUs or their GPUs (NOTE [Devices]).
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <map>

#include "loom/core/error.h"
#include "loom/core/host_name.h"
#include "loom/dist/topology.h"
#include "loom/cuda/pinned_swap_tier.h"
#include "loom/models/transformer_config.h"
#include "loom/nn/attention.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/plan/gemm_peak.h"
#include "loom/train/devices.h"
#include "loom/train/profile_run.h"
#include "loom/train/profile_timing.h"
#include "loom/version.h"

namespace loom::train {
namespace {

// Long enough per GEMM shape for a stable median on a noisy host, short enough that the whole
// compute measurement takes seconds.
constexpr double kGemmSeconds = 0.3;
// The GEMM curve's [rows x d] x [d x d] products: a CPU's from d = 32, a GPU's, which reach their
// peak only far larger, from 256 to 8192.
struct CurveShapes {
  int64_t rows;
  std::array<int64_t, 6> dims;
};
constexpr CurveShapes kCpuCurve{2048, {32, 64, 128, 256, 512, 1024}};
constexpr CurveShapes kGpuCurve{8192, {256, 512, 1024, 2048, 4096, 8192}};
// Each of the add's three operands: beyond the caches (this machine's L3 is 300 MiB; the three
// together are 768 MiB; an H100's L2 is 50 MB), so the rate is the memory's.
constexpr int64_t kAddBytes = int64_t{256} << 20;
// The attention measured: a GPT-sized head at a sequence the workloads train at.
constexpr int64_t kAttnBatch = 2, kAttnHeads = 8, kAttnSeq = 512, kAttnHeadDim = 64;
// The host link's latency on one GPU: a copy this small is all latency.
constexpr int64_t kLatencyCopyBytes = 4096;

// NOTE [Overlap]'s measurement: an all-reduce of this many bytes (a gradient bucket's order) beside
// GEMMs of 1024 (a GPU's: its peak's larger size), which on a CPU rank take tens of milliseconds,
// as a layer's backward does between the reducer's tests.
constexpr int64_t kOverlapBytes = int64_t{16} << 20;

// The peak is measured this many times, each for a share of kGemmSeconds per size: the median is
// the file's, the spread tells a busy host (NOTE [Cached cluster]).
constexpr int64_t kPeakRepeats = 3;

// Runs the scope with a device's intra-op threads (ProfileOptions::cluster_threads) and restores the
// profile's count after, also when a measurement throws.
class DeviceThreads {
 public:
  explicit DeviceThreads(int64_t threads) : threads_(at::get_num_threads()) {
    at::set_num_threads(static_cast<int>(threads));
  }
  ~DeviceThreads() { at::set_num_threads(threads_); }
  DeviceThreads(const DeviceThreads&) = delete;
  DeviceThreads& operator=(const DeviceThreads&) = delete;

 private:
  int threads_;
};

// Per dtype, the device's peak; bfloat16's on the path its products take here (NOTE [bf16
// products]: widened to float32 on a CPU without bfloat16 instructions, so a plan prices it at the
// speed a run gets). `spread`: the float32 peak's.
std::map<DType, double> measure_peaks(double& spread, const ProfileDevice& device, const std::function<void()>& together) {
  std::map<DType, double> peaks;
  const std::vector<int64_t> sizes = device.gpu() ? plan::gemm_peak_sizes(device.torch()) : std::vector<int64_t>{1024, 2048};
  const Bf16Products products = nn::choose_bf16_products(Bf16Products::Auto, nn::this_cpu(), device.gpu()).path;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    together();
    const plan::PeakMeasurement peak = plan::measure_gemm_peak_repeated(
        nn::activation_type(dtype), kGemmSeconds / kPeakRepeats, kPeakRepeats, sizes, device.torch(), products);
    peaks[dtype] = peak.flops_per_s;
    if (dtype == DType::Float32) spread = peak.spread;
  }
  return peaks;
}

GemmCurve measure_gemm_curve(double peak, const ProfileDevice& device, const std::function<void()>& together) {
  const CurveShapes& shapes = device.gpu() ? kGpuCurve : kCpuCurve;
  std::vector<double> dims, efficiency;
  for (int64_t d : shapes.dims) {
    together();
    dims.push_back(static_cast<double>(d));
    efficiency.push_back(plan::measure_gemm_rate(shapes.rows, d, d, at::kFloat, kGemmSeconds, device.torch()) / peak);
  }
  return fit_gemm_curve(dims, efficiency);
}

// A pass's model FLOPs (forward + backward = 3 x the forward's, as the cost model counts them)
// per second of the kernel's forward and backward. An unfused kernel's score tiles cross memory,
// which the cost model charges apart (nn::causal_attention_score_bytes, forward once and backward
// twice, at `bytes_per_s`): that time is taken out, leaving the rate of its matmuls. A GPU's fused
// one keeps its scores on chip (NOTE [Kernel fusion]). `fused`: which ran.
double measure_attention(const nn::AttentionKernel& kernel, double peak, double bytes_per_s, int64_t repeats,
                         const ProfileDevice& device, bool& fused) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device.torch());
  const at::Tensor q = at::randn({kAttnBatch, kAttnHeads, kAttnSeq, kAttnHeadDim}, options), k = at::randn_like(q),
                   v = at::randn_like(q), dout = at::randn_like(q);
  // On a CPU every attention kernel of loom passes its score tiles through memory (NOTE [Kernel
  // fusion]); on a GPU the fused kernel keeps them on chip.
  fused = device.gpu() && nn::runs_fused(kernel, q, k, 0);
  const double seconds = median_time(repeats, [&] {
    const nn::AttentionForward f = nn::attention_forward(kernel, q, k, v);
    nn::attention_backward(kernel, dout, q, k, v, f.out, f.lse);
  }, device);
  const double flops = 3 * nn::causal_attention_flops(kAttnBatch, kAttnHeads, kAttnSeq, kAttnHeadDim);
  const double passes =
      fused ? 0 : 3 * nn::causal_attention_score_bytes(kAttnBatch, kAttnHeads, kAttnSeq, 4) / bytes_per_s;
  // A noisy host can make the passes look longer than the whole kernel: keep a tenth of it for the matmuls.
  return std::min(1.0, flops / std::max(seconds - passes, 0.1 * seconds) / peak);
}

// Bytes per second of c = a + b: two operands read, one written.
double measure_memory_bandwidth(int64_t repeats, const ProfileDevice& device) {
  const int64_t n = kAddBytes / 4;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device.torch());
  const at::Tensor a = at::ones({n}, options), b = at::ones({n}, options);
  at::Tensor c = at::empty({n}, options);
  return 3 * static_cast<double>(kAddBytes) / median_time(repeats, [&] { at::add_out(c, a, b); }, device);
}

// What one device computes and moves: peaks, the GEMM curve, attention, memory; the kernels it ran
// (NOTE [Kernel fusion]): loom's elementwise passes are libtorch's eager kernels on either device,
// each a pass over memory; attention is fused where the config's kernel ran fused.
// Every rank measures each of them at the same time (`world`'s ranks start each together): a rank
// that ran ahead into lighter work would leave the cores to the others, which would then read
// faster than a run's ranks get.
void measure_compute(const Config& config, dist::Communicator& world, plan::Cluster& c, const ProfileOptions& options,
                     const ProfileDevice& device) {
  const int64_t repeats = options.repeats;
  const DeviceThreads threads(options.cluster_threads);
  const std::function<void()> together = [&world] { wait_quietly(world); };
  c.measured = plan::Measurement{.threads = options.cluster_threads};
  c.peak_flops = measure_peaks(c.measured->peak_spread, device, together);
  const double peak = c.peak_flops.at(DType::Float32);
  const GemmCurve curve = measure_gemm_curve(peak, device, together);
  c.gemm_max = curve.gemm_max, c.gemm_half_dim = curve.gemm_half_dim;
  together();
  c.memory_bytes_per_s = measure_memory_bandwidth(repeats, device);
  together();
  bool fused = false;
  c.attention_efficiency = measure_attention(models::attention_kernel(config.model), peak, c.memory_bytes_per_s,
                                             repeats, device, fused);
  c.memory_efficiency = 1;  // the measured rate is what a kernel gets
  c.kind = device.gpu() ? DeviceKind::Gpu : DeviceKind::Cpu;
  c.attention_kernel = fused ? Fusion::Fused : Fusion::Unfused;
  c.elementwise_kernel = Fusion::Unfused;
}

// NOTE [Overlap] on this job's ranks, every one at once: an all-reduce over `world` alone (comm), as
// many GEMMs as take about as long alone (compute), then both, the all-reduce tested after each
// GEMM as the gradient reducer tests its buckets after each layer (NOTE [Progress]). The share of
// the shorter one that hid, (compute + comm - both) / min, in [0, 1]; the smallest rank's, which
// a step waits for.
double measure_overlap(dist::Communicator& world, int64_t repeats, const ProfileDevice& device) {
  if (world.size() < 2) return 1;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device.torch());
  at::Tensor buffer = at::zeros({kOverlapBytes / 4}, options);  // sums of zeros stay finite
  const int64_t n = device.gpu() ? plan::gemm_peak_sizes(device.torch()).back() : 1024;
  const at::Tensor a = at::rand({n, n}, options), b = at::rand({n, n}, options);
  at::Tensor c = at::empty({n, n}, options);
  // Each sample starts on every rank at once, so that none times its wait for a slower one.
  auto timed = [&](const std::function<void()>& run) {
    return median_time(repeats, run, device, [&world] { wait_quietly(world); });
  };
  const double comm = timed([&] { world.all_reduce_async(buffer, dist::ReduceOp::Sum)->wait(); });
  const double gemm = timed([&] { at::mm_out(c, a, b); });
  const int64_t count = std::max<int64_t>(1, std::llround(comm / gemm));
  auto compute = [&](dist::Work* beside) {
    for (int64_t i = 0; i < count; ++i) {
      at::mm_out(c, a, b);
      if (beside) beside->test();
    }
  };
  const double alone = timed([&] { compute(nullptr); });
  const double both = timed([&] {
    const dist::WorkPtr work = world.all_reduce_async(buffer, dist::ReduceOp::Sum);
    compute(work.get());
    work->wait();
  });
  const double hidden = std::clamp((alone + comm - both) / std::min(alone, comm), 0.0, 1.0);
  at::Tensor least = at::full({1}, -hidden, at::kDouble);  // the smallest: the largest of the negatives
  world.all_reduce(least, dist::ReduceOp::Max);
  return -least.item<double>();
}

// One GPU alone has no link to another device: the links are its host link (the pinned copies'
// rate, a small copy's time as latency), which a plan of one device never prices.
plan::LinkSpec host_link(const plan::Cluster& c, const ProfileOptions& options, const ProfileDevice& device) {
  const std::unique_ptr<memory::SwapTier> tier = cuda::make_pinned_swap_tier(device.placement.gpu);
  at::Tensor on_device = tier->device_empty({kLatencyCopyBytes}, at::kByte);
  const at::Tensor host = tier->host_empty({kLatencyCopyBytes}, at::kByte);
  const double seconds = median_time(options.repeats, [&] { tier->copy(on_device, host); }, device);
  return {.bytes_per_s = c.host_bytes_per_s, .latency_s = seconds};
}

// Where the numbers come from: this host, or the hosts and their ranks.
std::string measured_on(const dist::Communicator& world, int hosts) {
  const int n = world.size();
  if (hosts == 1) return fmt::format("{}: {} rank{}", host_name("this host"), n, n == 1 ? "" : "s");
  return fmt::format("{} hosts x {} rank{} (rank 0 on {})", hosts, n / hosts, n / hosts == 1 ? "" : "s", host_name("this host"));
}

// The devices, links and collectives from the job and `machine`'s copies and collectives;
// `hosts_link`: measure_hosts_link's, on several hosts.
void describe_machine(const dist::Communicator& world, int hosts, const plan::Profile& machine,
                      const HostsLink& hosts_link, const ProfileOptions& options,
                      const ProfileDevice& device, plan::Cluster& c) {
  c.name = "local";
  c.source = device.gpu() ? fmt::format("{} on {} on GPUs", plan::kMeasuredSource, measured_on(world, hosts))
                          : fmt::format("{} on {}, {} thread{} each", plan::kMeasuredSource, measured_on(world, hosts),
                                        c.measured->threads, c.measured->threads == 1 ? "" : "s");
  c.measured->unix_time = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  c.measured->ranks = world.size();
  c.measured->loom_version = loom::version();
  c.devices_per_node = world.size() / hosts;
  c.max_nodes = hosts;
  const plan::RankMemory memory = rank_memory(device.placement, static_cast<int>(c.devices_per_node));
  c.memory_bytes = memory.bytes / memory.sharers;
  c.host_bytes_per_s = std::min(machine.device_to_host_bytes_per_s, machine.host_to_device_bytes_per_s);
  for (const plan::CollectiveProfile& m : machine.collectives) {
    c.collectives.push_back({.op = option_from<CommOp>("collective.op", m.op), .ranks = m.ranks,
                             .alpha_s = m.alpha_s, .beta_s_per_byte = m.beta_s_per_byte});
    if (m.op == "send_recv")  // one host: a link between nodes is one between its ranks too
      c.intra_node = c.inter_node = {.bytes_per_s = 1 / m.beta_s_per_byte, .latency_s = m.alpha_s};
  }
  if (hosts > 1) {
    c.inter_node = {.bytes_per_s = 1 / hosts_link.device.beta_s_per_byte, .latency_s = hosts_link.device.alpha_s};
    c.node_bytes_per_s = hosts_link.node_bytes_per_s;
    if (c.devices_per_node == 1) c.intra_node = c.inter_node;  // no link within a node of one device
  }
  if (world.size() == 1 && device.gpu()) c.intra_node = c.inter_node = host_link(c, options, device);
  LOOM_CHECK(c.intra_node.bytes_per_s > 0, "[profile] the machine's profile has no send_recv to take the links from");
}

}  // namespace

std::string host_counts(const std::vector<int>& host_of) {
  std::vector<int> counts;
  for (size_t r = 0; r < host_of.size(); ++r) {
    if (r == 0 || host_of[r] != host_of[r - 1]) counts.push_back(0);
    ++counts.back();
  }
  return fmt::format("{}", fmt::join(counts, ", "));
}

void check_cluster_input(int world_size, int per_host, bool gpu, const std::string& counts) {
  LOOM_CHECK_INPUT(world_size >= 2 || gpu,
                   "[profile] --cluster-out on CPUs needs 2 ranks or more (its links are their send_recv), but the "
                   "job has {}; hint: run it under mpiexec -n 2 (or one rank per core)",
                   world_size);
  LOOM_CHECK_INPUT(per_host > 0,
                   "[profile] --cluster-out describes nodes of as many ranks each, numbered consecutively, but the "
                   "job's hosts hold {} ranks; hint: give every host the same slots and fill each in turn "
                   "(mpirun --map-by slot)",
                   counts);
}

plan::Cluster measure_cluster(const Config& config, dist::Communicator& world, const ProfileOptions& options,
                              const plan::Profile& machine) {
  const ProfileDevice device{options.placement};
  const std::vector<int> host_of = dist::hosts_of_ranks(world);
  const int per_host = dist::ranks_per_host(host_of);
  check_cluster_input(world.size(), per_host, device.gpu(), host_counts(host_of));
  plan::Cluster cluster;
  wait_quietly(world);  // every rank starts at once: each device computes while the others do
  measure_compute(config, world, cluster, options, device);
  wait_quietly(world);  // none leaves (to spin in MPI) while another still measures
  const int hosts = world.size() / per_host;
  // The links and the overlap on the devices' communicator, as the collectives (measure_profile)
  // and a run's gradient buckets; one device alone has neither.
  cuda::Placement placement = device.placement;
  const std::unique_ptr<dist::Communicator> device_world =
      world.size() > 1 ? connect_devices(world, placement, options.devices, config.train.device.name()) : nullptr;
  dist::Communicator& devices = device_world ? *device_world : world;
  HostsLink hosts_link;
  if (hosts > 1) hosts_link = measure_hosts_link(devices, options.repeats, device);
  double overlap = 1;
  {
    const DeviceThreads threads(options.cluster_threads);
    overlap = measure_overlap(devices, options.repeats, device);
  }
  if (world.rank() != 0) return {};
  describe_machine(world, hosts, machine, hosts_link, options, device, cluster);
  cluster.overlap = overlap;
  return cluster;
}

GemmCurve fit_gemm_curve(const std::vector<double>& dims, const std::vector<double>& efficiency) {
  LOOM_CHECK(dims.size() == efficiency.size(), "[profile] {} dims against {} efficiencies", dims.size(),
             efficiency.size());
  // The collectives' line fit, on the relative error: a GEMM's noise is a share of its time, so
  // every dim weighs alike. Its floors (1e-7, 1e-15) lie far below any a and b a CPU gives.
  std::vector<double> x, y;
  for (size_t i = 0; i < dims.size(); ++i) x.push_back(1 / dims[i]), y.push_back(1 / efficiency[i]);
  const LineFit line = fit_alpha_beta(x, y);
  GemmCurve curve;
  curve.gemm_max = line.alpha_s > 1 ? 1 / line.alpha_s : 1.0;
  curve.gemm_half_dim = std::max(0.0, line.beta_s_per_byte * curve.gemm_max);
  return curve;
}

}  // namespace loom::train
