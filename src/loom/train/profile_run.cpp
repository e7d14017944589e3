#include "loom/train/profile_run.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string_view>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/stats.h"
#include "loom/cuda/pinned_swap_tier.h"
#include "loom/dist/mesh.h"
#include "loom/dist/null_communicator.h"
#include "loom/memory/swap.h"
#include "loom/models/registry.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/train/devices.h"
#include "loom/train/profile_timing.h"

namespace loom::train {
namespace {

using Clock = ProfileClock;

constexpr int64_t kCopyBytes = int64_t{64} << 20;
// The line's floors (fit_alpha_beta) lie far below any latency and time per byte a link gives.
constexpr double kAlphaFloor = 1e-7, kBetaFloor = 1e-15;
constexpr int64_t kSmallestMessage = int64_t{4} << 10, kLargestMessage = int64_t{16} << 20;

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
               std::vector<double>* saved_bytes, const std::set<const void*>& params, const ProfileDevice& device) {
  const size_t n = model.chain.size();
  std::vector<nn::Saved> saved(n);
  // Each call timed until its work has run on the device.
  auto timed = [&](std::vector<double> LayerSamples::*column, size_t l, const std::function<void()>& call) {
    const Clock::time_point start = Clock::now();
    call();
    device.wait();
    if (samples) ((*samples)[l].*column).push_back(seconds_since(start));
  };
  at::Tensor x = mb.tokens;
  for (size_t l = 0; l < n; ++l) {
    timed(&LayerSamples::forward, l, [&] { x = model.chain[l]->forward(x, mb, saved[l]); });
    if (saved_bytes) (*saved_bytes)[l] = held_bytes(saved[l], params);
  }
  at::Tensor dy;  // the last layer returns the loss and takes no gradient
  for (size_t l = n; l-- > 0;) {
    timed(&LayerSamples::backward_input, l, [&] { dy = model.chain[l]->backward_input(dy, saved[l]); });
    timed(&LayerSamples::backward_weight, l, [&] { model.chain[l]->backward_weight(saved[l]); });
  }
}

models::Model build_chain(const models::ModelKind& kind, const Config& c, dist::Communicator& tp,
                          const parallel::SpOptions& sp, const ProfileDevice& device) {
  // The products on the path a run here takes (NOTE [bf16 products]), so the times are its own.
  const Bf16Products products = c.model.dtype == DType::BFloat16
                                    ? nn::choose_bf16_products(c.model.bf16_products, nn::this_cpu(), device.gpu()).path
                                    : Bf16Products::Native;
  models::Model model = models::build_model(
      kind, c.model,
      {.tp = tp, .tp_options = {.overlap = c.parallel.tp_overlap, .sequence = c.parallel.tp_sequence}, .sp = sp},
      products);
  model.initialise(static_cast<uint64_t>(c.train.seed),
                   at::TensorOptions().dtype(nn::master_type(c.model.dtype)).device(device.torch()));
  for (nn::Param* p : model.params()) nn::refresh_compute(*p, nn::activation_type(c.model.dtype));
  return model;
}

// Called by every rank of the tp x sp group together (the layers' collectives span it).
std::vector<plan::LayerProfile> measure_layers(const models::ModelKind& kind, const Config& c, dist::Communicator& tp,
                                               const parallel::SpOptions& sp, int64_t repeats,
                                               const ProfileDevice& device) {
  models::Model model = build_chain(kind, c, tp, sp, device);
  // The kind's own data (its sample format), this rank's sequence segments of micro-batch 0.
  const nn::MicroBatch mb = parallel::local_segments(kind.open_data(c)->microbatch(0, 0), sp).to(device.torch());
  const size_t n = model.chain.size();
  const std::set<const void*> params = param_storages(model);
  std::vector<double> saved_bytes(n);
  std::vector<LayerSamples> samples(n);
  run_chain(model, mb, nullptr, &saved_bytes, params, device);  // warm-up
  for (int64_t r = 0; r < repeats; ++r) run_chain(model, mb, &samples, nullptr, params, device);
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
                                              int64_t repeats, const ProfileDevice& device) {
  const auto& p = c.parallel;
  const int group_size = static_cast<int>(p.tp * p.sp);
  std::vector<plan::LayerProfile> layers;
  if (group_size == 1) {
    if (world.rank() == 0) {
      dist::NullCommunicator tp("tp");
      layers = measure_layers(kind, c, tp, {}, repeats, device);
    }
  } else {
    const std::unique_ptr<dist::Communicator> group = world.split(world.rank() < group_size ? 0 : 1, world.rank(), "profile");
    if (world.rank() < group_size) {
      dist::Mesh mesh(*group, dist::MeshDegrees{.sp = static_cast<int>(p.sp), .tp = static_cast<int>(p.tp)});
      layers = measure_layers(kind, c, mesh.tp(), {.sp = &mesh.sp(), .mode = p.sp_mode}, repeats, device);
    }
  }
  wait_quietly(world);
  return layers;
}

// ---- the swap tier's copies ----

// NOTE [Swap tier]: the device's tier (pinned blocks and a copy stream on a GPU).
void measure_copy(plan::Profile& profile, int64_t repeats, const ProfileDevice& device) {
  const std::unique_ptr<memory::SwapTier> tier =
      device.gpu() ? cuda::make_pinned_swap_tier(device.placement.gpu) : memory::make_host_tier();
  at::Tensor on_device = tier->device_empty({kCopyBytes}, at::kByte), host = tier->host_empty({kCopyBytes}, at::kByte);
  on_device.fill_(1);  // touched, so the first timed copy does not fault its pages in
  const auto bytes = static_cast<double>(kCopyBytes);
  profile.device_to_host_bytes_per_s = bytes / median_time(repeats, [&] { tier->copy(host, on_device); }, device);
  profile.host_to_device_bytes_per_s = bytes / median_time(repeats, [&] { tier->copy(on_device, host); }, device);
}

// ---- collectives ----

// One operation of `op` over `group` on float32 buffers of about `bytes` (a multiple of the group
// size in elements); returns the bytes it counts (plan::CollectiveProfile) and the operation.
std::pair<double, std::function<void()>> collective(dist::Communicator& group, const std::string& op, int64_t bytes,
                                                    const ProfileDevice& device) {
  const int64_t g = group.size(), n = std::max<int64_t>(1, bytes / 4 / g) * g;
  const auto on_device = at::TensorOptions().dtype(at::kFloat).device(device.torch());
  auto big = std::make_shared<at::Tensor>(at::zeros({n}, on_device));  // zeros: sums stay finite
  auto piece = std::make_shared<at::Tensor>(at::zeros({n / g}, on_device));
  auto other = std::make_shared<at::Tensor>(at::zeros({n}, on_device));
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

// The bytes each message size counts and the seconds of one `op` at it (rank 0's clock; the group
// starts each sample together), from the smallest size to the largest.
struct OpTimes {
  std::vector<double> sizes, seconds;
};
OpTimes time_op(dist::Communicator& group, const std::string& op, int64_t repeats, const ProfileDevice& device) {
  std::vector<double> sizes, seconds;
  for (int64_t bytes = kSmallestMessage; bytes <= kLargestMessage; bytes *= 4) {
    const auto [counted, run] = collective(group, op, bytes, device);
    // Small messages batched, so that the barrier's skew between ranks is spread over several.
    const int64_t iterations = std::clamp<int64_t>((int64_t{1} << 20) / bytes, 1, 16);
    std::vector<double> samples;
    for (int64_t r = 0; r <= repeats; ++r) {
      group.barrier();
      const Clock::time_point start = Clock::now();
      for (int64_t i = 0; i < iterations; ++i) run();
      device.wait();
      if (r > 0) samples.push_back(seconds_since(start) / static_cast<double>(iterations));
    }
    sizes.push_back(counted);
    seconds.push_back(median(samples) / (op == "send_recv" ? 2.0 : 1.0));
  }
  return {std::move(sizes), std::move(seconds)};
}

plan::CollectiveProfile measure_op(dist::Communicator& group, const std::string& op, int64_t repeats,
                                   const ProfileDevice& device) {
  const OpTimes t = time_op(group, op, repeats, device);
  const LineFit fit = fit_alpha_beta(t.sizes, t.seconds);
  return {.op = op, .ranks = group.size(), .alpha_s = fit.alpha_s, .beta_s_per_byte = fit.beta_s_per_byte};
}

// On several hosts each host's ranks measure among themselves (NOTE [Hosts in the mesh]): the
// collectives describe a node, and the link between nodes is measured apart (measure_hosts_link).
std::vector<plan::CollectiveProfile> measure_collectives(dist::Communicator& world, int64_t repeats,
                                                         const ProfileDevice& device) {
  if (world.local_ranks() < world.size()) {
    const std::unique_ptr<dist::Communicator> node = world.split(world.host(), world.rank(), "host");
    std::vector<plan::CollectiveProfile> out = measure_collectives(*node, repeats, device);
    wait_quietly(world);
    return out;
  }
  std::vector<plan::CollectiveProfile> out;
  for (int g = 2; g <= world.size(); ++g) {
    const std::unique_ptr<dist::Communicator> group = world.split(world.rank() < g ? 0 : 1, world.rank(), "profile");
    if (world.rank() < g)
      for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"})
        if (g == 2 || std::string(op) != "send_recv") out.push_back(measure_op(*group, op, repeats, device));
    wait_quietly(world);
  }
  return out;
}

}  // namespace

namespace {

// NOTE [Node link]: every rank of the first host sends one message of each size to its peer on the
// second at once (the world's ranks all start together), timed on each sender; the node's rate is
// all of their bytes over the sustained time per byte of the slowest (fit_sustained of its two
// sizes, which cancels a shaper's burst as for the device's link).
double measure_node_link(dist::Communicator& world, int64_t repeats, const ProfileDevice& device) {
  const int per_host = world.local_ranks(), rank = world.rank();
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device.torch());
  std::vector<double> sizes, seconds;
  for (int64_t bytes : {kLargestMessage / 4, kLargestMessage}) {
    at::Tensor buffer = at::zeros({bytes / 4}, options);
    std::vector<double> samples;
    for (int64_t r = 0; r <= repeats; ++r) {
      wait_quietly(world);
      const Clock::time_point start = Clock::now();
      if (rank < per_host) world.send(buffer, rank + per_host);
      if (rank >= per_host && rank < 2 * per_host) world.recv(buffer, rank - per_host);
      device.wait();
      at::Tensor took = at::full({1}, rank < per_host ? seconds_since(start) : 0.0, at::kDouble);
      world.all_reduce(took, dist::ReduceOp::Max);
      if (r > 0) samples.push_back(took.item<double>());
    }
    sizes.push_back(static_cast<double>(bytes));
    seconds.push_back(median(samples));
  }
  return per_host / fit_sustained(sizes, seconds).beta_s_per_byte;
}

}  // namespace

HostsLink measure_hosts_link(dist::Communicator& world, int64_t repeats, const ProfileDevice& device) {
  const int other = world.local_ranks();  // the first rank of the second host (ranks_per_host holds)
  const bool pair = world.rank() == 0 || world.rank() == other;
  const std::unique_ptr<dist::Communicator> group = world.split(pair ? 0 : 1, world.rank(), "hosts link");
  HostsLink link;
  if (pair) {
    const OpTimes t = time_op(*group, "send_recv", repeats, device);
    const LineFit fit = fit_sustained(t.sizes, t.seconds);
    link.device = {.op = "send_recv", .ranks = 2, .alpha_s = fit.alpha_s, .beta_s_per_byte = fit.beta_s_per_byte};
  }
  wait_quietly(world);
  if (world.local_ranks() > 1) link.node_bytes_per_s = measure_node_link(world, repeats, device);
  return link;
}

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

cuda::Placement place_profile(const Config& config, const dist::Communicator& world,
                              const dist::DeviceBackend* devices) {
  cuda::Placement placement = cuda::place_this_rank(config, world.local_rank(), world.local_ranks(),
                                                    [devices] { return dist::backend_missing(devices); });
  cuda::check_trainable(config, placement);
  return placement;
}

plan::Profile measure_profile(const Config& config, dist::Communicator& world, const ProfileOptions& options,
                              const models::ModelKinds& kinds) {
  check_profile_input(config, world.size(), options);
  at::set_num_threads(run_threads(config, world));
  ProfileDevice device{options.placement};
  // The layers' and the collectives' tensors cross the communicator a run's would.
  const std::unique_ptr<dist::Communicator> device_world =
      connect_devices(world, device.placement, options.devices, config.train.device.name());
  dist::Communicator& comm = device_world ? *device_world : world;
  plan::Profile profile{.identity = plan::profile_identity(config), .threads = at::get_num_threads()};
  if (options.layers)
    profile.layers = measure_chain(kinds.find(config.model.kind), config, comm, options.repeats, device);
  if (world.rank() == 0) measure_copy(profile, options.repeats, device);
  wait_quietly(comm);
  profile.collectives = measure_collectives(comm, options.repeats, device);
  return profile;
}

LineFit fit_sustained(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  const size_t n = bytes.size();
  LOOM_CHECK(n == seconds.size() && n >= 2 && bytes[n - 1] > bytes[n - 2],
             "[profile] a sustained rate needs two sizes or more, rising, got {}", n);
  const double beta = (seconds[n - 1] - seconds[n - 2]) / (bytes[n - 1] - bytes[n - 2]);
  if (!(beta > 0)) return fit_alpha_beta(bytes, seconds);  // noise larger than the bytes' time
  // The smallest message's bytes may have come faster than the rate (a burst): it is then all latency.
  const double alpha = seconds[0] - beta * bytes[0];
  return {.alpha_s = alpha > kAlphaFloor ? alpha : std::max(kAlphaFloor, seconds[0]), .beta_s_per_byte = beta};
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
  if (fit.alpha_s < kAlphaFloor) {
    fit.alpha_s = kAlphaFloor;
    fit.beta_s_per_byte = (sxy - kAlphaFloor * sx) / sxx;
  }
  fit.beta_s_per_byte = std::max(fit.beta_s_per_byte, kBetaFloor);
  return fit;
}

}  // namespace loom::train
