#include "loom/train/profile_run.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/stats.h"
#include "loom/dist/mesh.h"
#include "loom/dist/null_communicator.h"
#include "loom/memory/host_memory.h"
#include "loom/memory/swap.h"
#include "loom/models/registry.h"
#include "loom/models/transformer_config.h"
#include "loom/nn/attention.h"
#include "loom/nn/precision.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/plan/gemm_peak.h"
#include "loom/version.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kCopyBytes = int64_t{64} << 20;
constexpr int64_t kSmallestMessage = int64_t{4} << 10, kLargestMessage = int64_t{16} << 20;
// The clock's resolution: a call that measured 0 s (a layer without weights has an empty weight
// gradient) is recorded as this, so every time in a profile is positive.
constexpr double kShortest = 1e-9;

double seconds_since(Clock::time_point start) {
  return std::max(kShortest, std::chrono::duration<double>(Clock::now() - start).count());
}

// Times `run` once as a warm-up, then `repeats` times; the median of those.
double median_time(int64_t repeats, const std::function<void()>& run) {
  std::vector<double> samples;
  for (int64_t r = 0; r <= repeats; ++r) {
    const Clock::time_point start = Clock::now();
    run();
    if (r > 0) samples.push_back(seconds_since(start));
  }
  return median(samples);
}

// Every rank of `comm` arrives before any leaves, without spinning a core: the ranks that wait
// while others measure must not take the measuring ranks' cores (a blocking barrier polls).
void wait_quietly(dist::Communicator& comm) {
  if (comm.size() == 1) return;
  at::Tensor token = at::zeros({1}, at::kFloat);
  const dist::WorkPtr work = comm.all_reduce_async(token, dist::ReduceOp::Sum);
  while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// ---- layers ----

struct LayerSamples {
  std::vector<double> forward, backward_input, backward_weight;
};

// Bytes of the distinct storages a layer's saved state holds, parameters' storages left out (a
// state may keep a reference to a weight it reads in backward; that memory is the weight's).
double held_bytes(nn::Saved& saved, const std::set<const void*>& param_storages) {
  std::set<const void*> seen;
  double bytes = 0;
  saved.for_each_tensor([&](std::string_view, at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    const void* data = t.storage().data();
    if (param_storages.contains(data) || !seen.insert(data).second) return;
    bytes += static_cast<double>(t.storage().nbytes());
  });
  return bytes;
}

std::set<const void*> param_storages(models::Model& model) {
  std::set<const void*> out;
  for (nn::Param* p : model.params())
    for (const at::Tensor* t : {&p->value, &p->grad, &p->compute})
      if (t->defined()) out.insert(t->storage().data());
  return out;
}

// One micro-batch through the chain as a step runs it: every forward in order on the previous
// layer's output, then per layer in reverse its input gradient and weight gradient. `samples`
// null: a warm-up; `saved_bytes` non-null: filled after each forward.
void run_chain(models::Model& model, const nn::MicroBatch& mb, std::vector<LayerSamples>* samples,
               std::vector<double>* saved_bytes, const std::set<const void*>& params) {
  const size_t n = model.chain.size();
  std::vector<nn::Saved> saved(n);
  at::Tensor x = mb.tokens;
  for (size_t l = 0; l < n; ++l) {
    const Clock::time_point start = Clock::now();
    x = model.chain[l]->forward(x, mb, saved[l]);
    if (samples) (*samples)[l].forward.push_back(seconds_since(start));
    if (saved_bytes) (*saved_bytes)[l] = held_bytes(saved[l], params);
  }
  at::Tensor dy;  // the last layer returns the loss and takes no gradient
  for (size_t l = n; l-- > 0;) {
    Clock::time_point start = Clock::now();
    dy = model.chain[l]->backward_input(dy, saved[l]);
    if (samples) (*samples)[l].backward_input.push_back(seconds_since(start));
    start = Clock::now();
    model.chain[l]->backward_weight(saved[l]);
    if (samples) (*samples)[l].backward_weight.push_back(seconds_since(start));
  }
}

models::Model build_chain(const models::ModelKind& kind, const Config& c, dist::Communicator& tp,
                          const parallel::SpOptions& sp) {
  models::Model model =
      kind.build(c.model, {.tp = tp,
                           .tp_options = {.overlap = c.parallel.tp_overlap, .sequence = c.parallel.tp_sequence},
                           .sp = sp});
  model.initialise(static_cast<uint64_t>(c.train.seed), nn::master_type(c.model.dtype));
  for (nn::Param* p : model.params()) nn::refresh_compute(*p, nn::activation_type(c.model.dtype));
  return model;
}

// Called by every rank of the tp x sp group together (the layers' collectives span it).
std::vector<plan::LayerProfile> measure_layers(const models::ModelKind& kind, const Config& c, dist::Communicator& tp,
                                               const parallel::SpOptions& sp, int64_t repeats) {
  models::Model model = build_chain(kind, c, tp, sp);
  // The kind's own data (its sample format), this rank's sequence segments of micro-batch 0.
  const nn::MicroBatch mb =
      parallel::local_segments(kind.open_data(c)->microbatch(0, 0), sp);
  const size_t n = model.chain.size();
  const std::set<const void*> params = param_storages(model);
  std::vector<double> saved_bytes(n);
  std::vector<LayerSamples> samples(n);
  run_chain(model, mb, nullptr, &saved_bytes, params);  // warm-up
  for (int64_t r = 0; r < repeats; ++r) run_chain(model, mb, &samples, nullptr, params);
  std::vector<plan::LayerProfile> out;
  for (size_t l = 0; l < n; ++l) {
    plan::LayerProfile layer{.name = model.chain[l]->name(), .forward_s = median(samples[l].forward),
                             .backward_input_s = median(samples[l].backward_input),
                             .backward_weight_s = median(samples[l].backward_weight), .saved_bytes = saved_bytes[l]};
    for (nn::Param* p : model.chain[l]->params())
      layer.param_bytes += static_cast<double>(p->numel()) * static_cast<double>(p->value.element_size());
    out.push_back(std::move(layer));
  }
  return out;
}

// The first tp x sp ranks measure together (NOTE [Profile]); the rest wait.
std::vector<plan::LayerProfile> measure_chain(const models::ModelKind& kind, const Config& c, dist::Communicator& world,
                                              int64_t repeats) {
  const auto& p = c.parallel;
  const int group_size = static_cast<int>(p.tp * p.sp);
  std::vector<plan::LayerProfile> layers;
  if (group_size == 1) {
    if (world.rank() == 0) {
      dist::NullCommunicator tp("tp");
      layers = measure_layers(kind, c, tp, {}, repeats);
    }
  } else {
    const std::unique_ptr<dist::Communicator> group = world.split(world.rank() < group_size ? 0 : 1, world.rank(), "profile");
    if (world.rank() < group_size) {
      dist::Mesh mesh(*group, {.sp = static_cast<int>(p.sp), .tp = static_cast<int>(p.tp)});
      layers = measure_layers(kind, c, mesh.tp(), {.sp = &mesh.sp(), .mode = p.sp_mode}, repeats);
    }
  }
  wait_quietly(world);
  return layers;
}

// ---- the swap tier's copies ----

void measure_copy(plan::Profile& profile, int64_t repeats) {
  const std::unique_ptr<memory::SwapTier> tier = memory::make_host_tier();
  at::Tensor device = tier->device_empty({kCopyBytes}, at::kByte), host = tier->host_empty({kCopyBytes}, at::kByte);
  device.fill_(1);  // touched, so the first timed copy does not fault its pages in
  const auto bytes = static_cast<double>(kCopyBytes);
  profile.device_to_host_bytes_per_s = bytes / median_time(repeats, [&] { tier->copy(host, device); });
  profile.host_to_device_bytes_per_s = bytes / median_time(repeats, [&] { tier->copy(device, host); });
}

// ---- collectives ----

// One operation of `op` over `group` on float32 buffers of about `bytes` (a multiple of the group
// size in elements); returns the bytes it counts (plan::CollectiveProfile) and the operation.
std::pair<double, std::function<void()>> collective(dist::Communicator& group, const std::string& op, int64_t bytes) {
  const int64_t g = group.size(), n = std::max<int64_t>(1, bytes / 4 / g) * g;
  auto big = std::make_shared<at::Tensor>(at::zeros({n}, at::kFloat));  // zeros: sums stay finite
  auto piece = std::make_shared<at::Tensor>(at::zeros({n / g}, at::kFloat));
  auto other = std::make_shared<at::Tensor>(at::zeros({n}, at::kFloat));
  const double counted = static_cast<double>(n) * 4;
  dist::Communicator* c = &group;
  if (op == "all_reduce") return {counted, [c, big] { c->all_reduce(*big); }};
  if (op == "all_gather") return {counted, [c, big, piece] { c->all_gather(*piece, *big); }};
  if (op == "reduce_scatter") return {counted, [c, big, piece] { c->reduce_scatter(*big, *piece); }};
  if (op == "all_to_all") return {counted, [c, big, other] { c->all_to_all(*big, *other); }};
  // send_recv: a round trip between ranks 0 and 1, counted as two one-way messages below.
  return {counted, [c, big] {
            if (c->rank() == 0) {
              c->send(*big, 1);
              c->recv(*big, 1);
            } else {
              c->recv(*big, 0);
              c->send(*big, 0);
            }
          }};
}

// Seconds of one `op` at each message size (rank 0's clock; the group starts each sample together).
plan::CollectiveProfile measure_op(dist::Communicator& group, const std::string& op, int64_t repeats) {
  std::vector<double> sizes, seconds;
  for (int64_t bytes = kSmallestMessage; bytes <= kLargestMessage; bytes *= 4) {
    const auto [counted, run] = collective(group, op, bytes);
    // Small messages batched, so that the barrier's skew between ranks is spread over several.
    const int64_t iterations = std::clamp<int64_t>((int64_t{1} << 20) / bytes, 1, 16);
    std::vector<double> samples;
    for (int64_t r = 0; r <= repeats; ++r) {
      group.barrier();
      const Clock::time_point start = Clock::now();
      for (int64_t i = 0; i < iterations; ++i) run();
      if (r > 0) samples.push_back(seconds_since(start) / static_cast<double>(iterations));
    }
    sizes.push_back(counted);
    seconds.push_back(median(samples) / (op == "send_recv" ? 2.0 : 1.0));
  }
  const LineFit fit = fit_alpha_beta(sizes, seconds);
  return {.op = op, .ranks = group.size(), .alpha_s = fit.alpha_s, .beta_s_per_byte = fit.beta_s_per_byte};
}

std::vector<plan::CollectiveProfile> measure_collectives(dist::Communicator& world, int64_t repeats) {
  std::vector<plan::CollectiveProfile> out;
  for (int g = 2; g <= world.size(); ++g) {
    const std::unique_ptr<dist::Communicator> group = world.split(world.rank() < g ? 0 : 1, world.rank(), "profile");
    if (world.rank() < g)
      for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"})
        if (g == 2 || std::string(op) != "send_recv") out.push_back(measure_op(*group, op, repeats));
    wait_quietly(world);
  }
  return out;
}

// ---- this machine as a cluster (--cluster-out) ----

// Long enough per GEMM shape for a stable median on a noisy host, short enough that the whole
// compute measurement takes seconds.
constexpr double kGemmSeconds = 0.3;
constexpr int64_t kGemmRows = 2048;
constexpr std::array<int64_t, 6> kGemmDims{32, 64, 128, 256, 512, 1024};
// Each of the add's three operands: beyond the caches (this machine's L3 is 300 MiB; the three
// together are 768 MiB), so the rate is the memory's.
constexpr int64_t kAddBytes = int64_t{256} << 20;
// The attention measured: a GPT-sized head at a sequence the workloads train at.
constexpr int64_t kAttnBatch = 2, kAttnHeads = 8, kAttnSeq = 512, kAttnHeadDim = 64;

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

// Per dtype the device multiplies fast: bfloat16 only where native (emulated it is slower than
// float32, and a plan should not count on it). `spread`: the float32 peak's.
std::map<DType, double> measure_peaks(double& spread) {
  std::map<DType, double> peaks;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    if (dtype == DType::BFloat16 && !plan::native_bfloat16()) continue;
    const plan::PeakMeasurement peak = plan::measure_gemm_peak_repeated(
        nn::activation_type(dtype), kGemmSeconds / kPeakRepeats, kPeakRepeats, {1024, 2048});
    peaks[dtype] = peak.flops_per_s;
    if (dtype == DType::Float32) spread = peak.spread;
  }
  return peaks;
}

GemmCurve measure_gemm_curve(double peak) {
  std::vector<double> dims, efficiency;
  for (int64_t d : kGemmDims) {
    dims.push_back(static_cast<double>(d));
    efficiency.push_back(plan::measure_gemm_rate(kGemmRows, d, d, at::kFloat, kGemmSeconds) / peak);
  }
  return fit_gemm_curve(dims, efficiency);
}

// A pass's model FLOPs (forward + backward = 3 x the forward's, as the cost model counts them)
// per second of the kernel's forward and backward, less the time the cost model already charges
// for the score tiles' memory passes (nn::causal_attention_score_bytes, forward once and backward
// twice, at `bytes_per_s`): the rate of its matmuls.
double measure_attention(const nn::AttentionKernel& kernel, double peak, double bytes_per_s, int64_t repeats) {
  const at::Tensor q = at::randn({kAttnBatch, kAttnHeads, kAttnSeq, kAttnHeadDim}), k = at::randn_like(q),
                   v = at::randn_like(q), dout = at::randn_like(q);
  const double seconds = median_time(repeats, [&] {
    const nn::AttentionForward f = nn::attention_forward(kernel, q, k, v);
    nn::attention_backward(kernel, dout, q, k, v, f.out, f.lse);
  });
  const double flops = 3 * nn::causal_attention_flops(kAttnBatch, kAttnHeads, kAttnSeq, kAttnHeadDim);
  const double passes = 3 * nn::causal_attention_score_bytes(kAttnBatch, kAttnHeads, kAttnSeq, 4) / bytes_per_s;
  // A noisy host can make the passes look longer than the whole kernel: keep a tenth of it for the matmuls.
  return std::min(1.0, flops / std::max(seconds - passes, 0.1 * seconds) / peak);
}

// Bytes per second of c = a + b: two operands read, one written.
double measure_memory_bandwidth(int64_t repeats) {
  const int64_t n = kAddBytes / 4;
  const at::Tensor a = at::ones({n}), b = at::ones({n});
  at::Tensor c = at::empty({n});
  return 3 * static_cast<double>(kAddBytes) / median_time(repeats, [&] { at::add_out(c, a, b); });
}

// What one device computes and moves: peaks, the GEMM curve, attention, memory.
void measure_compute(const Config& config, plan::Cluster& c, const ProfileOptions& options) {
  const int64_t repeats = options.repeats;
  const DeviceThreads device(options.cluster_threads);
  c.measured = plan::Measurement{.threads = options.cluster_threads};
  c.peak_flops = measure_peaks(c.measured->peak_spread);
  const double peak = c.peak_flops.at(DType::Float32);
  const GemmCurve curve = measure_gemm_curve(peak);
  c.gemm_max = curve.gemm_max, c.gemm_half_dim = curve.gemm_half_dim;
  c.memory_bytes_per_s = measure_memory_bandwidth(repeats);
  c.attention_efficiency = measure_attention(models::attention_kernel(config.model), peak, c.memory_bytes_per_s, repeats);
  c.memory_efficiency = 1;  // the measured rate is what a kernel gets
  // loom's CPU kernels, as measured: measure_attention charged the score passes to memory.
  c.kind = DeviceKind::Cpu;
  c.attention_kernel = c.elementwise_kernel = Fusion::Unfused;
}

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "this host";
  return name.data();
}

// The devices, links and collectives from the job and `machine`'s copies and collectives.
void describe_machine(const dist::Communicator& world, const plan::Profile& machine, plan::Cluster& c) {
  c.name = "local";
  c.source = fmt::format("{} on {}: {} ranks, {} thread{} each", plan::kMeasuredSource, host_name(),
                         world.size(), c.measured->threads, c.measured->threads == 1 ? "" : "s");
  c.measured->unix_time = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  c.measured->ranks = world.size();
  c.measured->loom_version = loom::version();
  c.devices_per_node = world.size();
  c.max_nodes = 1;
  c.memory_bytes = static_cast<double>(memory::host_memory_bytes()) / static_cast<double>(world.size());
  c.host_bytes_per_s = std::min(machine.device_to_host_bytes_per_s, machine.host_to_device_bytes_per_s);
  for (const plan::CollectiveProfile& m : machine.collectives) {
    c.collectives.push_back({.op = option_from<CommOp>("collective.op", m.op), .ranks = m.ranks,
                             .alpha_s = m.alpha_s, .beta_s_per_byte = m.beta_s_per_byte});
    if (m.op == "send_recv")  // one host: a link between nodes is one between its ranks too
      c.intra_node = c.inter_node = {.bytes_per_s = 1 / m.beta_s_per_byte, .latency_s = m.alpha_s};
  }
  LOOM_CHECK(c.intra_node.bytes_per_s > 0, "[profile] the machine's profile has no send_recv to take the links from");
}

}  // namespace

int run_threads(const Config& config, const dist::Communicator& world) {
  if (config.train.threads > 0) return static_cast<int>(config.train.threads);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return world.size() > 1 ? std::max(1, cores / world.local_ranks()) : cores;
}

void check_profile_input(const Config& config, int world_size, const ProfileOptions& options) {
  LOOM_CHECK_INPUT(options.repeats >= 1 && options.repeats <= 1000,
                   "[profile] --repeats {} must be between 1 and 1000 (timed runs of each measurement)", options.repeats);
  const auto& p = config.parallel;
  LOOM_CHECK_INPUT(!options.layers || p.tp * p.sp <= world_size,
                   "[profile] parallel.tp ({}) x parallel.sp ({}) = {} ranks measure the layers together, but the job "
                   "has {}; hint: run it under mpiexec -n {} (or more), or profile with parallel.tp = 1 and "
                   "parallel.sp = 1",
                   p.tp, p.sp, p.tp * p.sp, world_size, p.tp * p.sp);
}

plan::Profile measure_profile(const Config& config, dist::Communicator& world, const ProfileOptions& options,
                              const models::ModelKinds& kinds) {
  check_profile_input(config, world.size(), options);
  at::set_num_threads(run_threads(config, world));
  plan::Profile profile{.identity = plan::profile_identity(config), .threads = at::get_num_threads()};
  if (options.layers) profile.layers = measure_chain(kinds.find(config.model.kind), config, world, options.repeats);
  if (world.rank() == 0) measure_copy(profile, options.repeats);
  wait_quietly(world);
  profile.collectives = measure_collectives(world, options.repeats);
  return profile;
}

void check_cluster_input(int world_size, int local_ranks) {
  LOOM_CHECK_INPUT(world_size >= 2,
                   "[profile] --cluster-out needs 2 ranks or more (its links are their send_recv), but the job has "
                   "{}; hint: run it under mpiexec -n 2 (or one rank per core)",
                   world_size);
  LOOM_CHECK_INPUT(local_ranks == world_size,
                   "[profile] --cluster-out measures one machine, but only {} of the job's {} ranks run on this host; "
                   "hint: run every rank on one machine",
                   local_ranks, world_size);
}

plan::Cluster measure_cluster(const Config& config, dist::Communicator& world, const ProfileOptions& options,
                              const plan::Profile& machine) {
  check_cluster_input(world.size(), world.local_ranks());
  plan::Cluster cluster;
  wait_quietly(world);  // every rank starts at once: each device computes while the others do
  measure_compute(config, cluster, options);
  wait_quietly(world);  // none leaves (to spin in MPI) while another still measures
  if (world.rank() != 0) return {};
  describe_machine(world, machine, cluster);
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

LineFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  LOOM_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2, "[profile] a line needs two points or more, got {}",
             bytes.size());
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double w = 1.0 / (seconds[i] * seconds[i]), x = bytes[i], y = seconds[i];
    s += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double det = s * sxx - sx * sx;
  LOOM_CHECK(det > 0, "[profile] a line needs two distinct message sizes");
  LineFit fit{.beta_s_per_byte = (s * sxy - sx * sy) / det};
  fit.alpha_s = (sy - fit.beta_s_per_byte * sx) / s;
  constexpr double kAlphaFloor = 1e-7, kBetaFloor = 1e-15;
  if (fit.alpha_s < kAlphaFloor) {
    fit.alpha_s = kAlphaFloor;
    fit.beta_s_per_byte = (sxy - kAlphaFloor * sx) / sxx;
  }
  fit.beta_s_per_byte = std::max(fit.beta_s_per_byte, kBetaFloor);
  return fit;
}

}  // namespace loom::train
