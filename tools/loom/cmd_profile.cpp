#include <nlohmann/json.hpp>

#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/core/error.h"
#include "loom/core/output_file.h"
#include "loom/dist/input_agreement.h"
#include "loom/dist/topology.h"
#include "loom/train/profile_run.h"

namespace loom::cli {
namespace {

// What a person reads: per layer its times and saved bytes (when the layers were measured), then
// the copies and the collectives.
std::string profile_table(const plan::Profile& p) {
  std::string text;
  if (!p.layers.empty()) {
    text += fmt::format("{:<28} {:>10} {:>10} {:>10} {:>10}\n", "layer", "fwd ms", "bwd-in ms", "bwd-w ms",
                        "saved MB");
    plan::LayerProfile total{.name = "total"};
    for (const plan::LayerProfile& l : p.layers) {
      text += fmt::format("{:<28} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.2f}\n", l.name, l.forward_s * 1e3,
                          l.backward_input_s * 1e3, l.backward_weight_s * 1e3, l.saved_bytes / 1e6);
      total.forward_s += l.forward_s, total.backward_input_s += l.backward_input_s;
      total.backward_weight_s += l.backward_weight_s, total.saved_bytes += l.saved_bytes;
    }
    text += fmt::format("{:<28} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.2f}\n", total.name, total.forward_s * 1e3,
                        total.backward_input_s * 1e3, total.backward_weight_s * 1e3, total.saved_bytes / 1e6);
  }
  text += fmt::format("copy: device -> host {:.2f} GB/s, host -> device {:.2f} GB/s ({} threads)\n",
                      p.device_to_host_bytes_per_s / 1e9, p.host_to_device_bytes_per_s / 1e9, p.threads);
  for (const plan::CollectiveProfile& c : p.collectives)
    text += fmt::format("{:<15} {} ranks: alpha {:.1f} us, 1/beta {:.2f} GB/s\n", c.op, c.ranks, c.alpha_s * 1e6,
                        1e-9 / c.beta_s_per_byte);
  return text;
}

// The compute numbers of --cluster-out, as a person checks them against the CPU's spec.
std::string cluster_table(const plan::Cluster& c) {
  std::string peaks;
  for (const auto& [dtype, flops] : c.peak_flops)
    peaks += fmt::format("{}{} {:.1f}", peaks.empty() ? "" : ", ", name_of(dtype), flops / 1e9);
  const plan::Measurement how = c.measured.value_or(plan::Measurement{});
  return fmt::format("cluster {}: {} devices; peak GFLOP/s {} (float32's repeats spread {:.0f}%, {} threads per "
                     "device); gemm_max {:.3f}, gemm_half_dim {:.1f}, attention {:.3f}; memory {:.2f} GB/s; link "
                     "{:.2f} GB/s, {:.1f} us\n",
                     c.name, c.devices_per_node, peaks, 100 * how.peak_spread, how.threads, c.gemm_max,
                     c.gemm_half_dim, c.attention_efficiency, c.memory_bytes_per_s / 1e9,
                     c.intra_node.bytes_per_s / 1e9, c.intra_node.latency_s * 1e6);
}

// The comment --cluster-out's file opens with: what the numbers are and how to measure them again.
std::string cluster_header(bool gpu) {
  return fmt::format(
      "# This machine, written by `loom profile --cluster-out` (docs/profile.md, NOTE [Cluster cost model]):\n"
      "# one device is {}; every number is measured, none assumed ([measured] says\n"
      "# when and how).\n"
      "# Measure again: {}\n",
      gpu ? "one rank on its GPU" : "one rank running one intra-op thread (train.threads where set)",
      gpu ? "loom profile -c CONFIG --set train.device=cuda --cluster-out FILE.toml (one rank per GPU)"
          : "mpiexec -n 2 loom profile -c configs/gpt-small.toml --cluster-out clusters/local.toml");
}

// `loom profile`'s files: checked against the inputs and each other, and opened as temporaries,
// before anything is measured; each appears whole once written (NOTE [Output files]).
struct ProfileFiles {
  std::string profile_path, cluster_path;
  OutputFile profile, cluster;

  void check(const std::vector<PathUse>& inputs) const {
    std::vector<PathUse> outputs;
    if (!profile_path.empty()) outputs.push_back({profile_path, "--out"});
    if (!cluster_path.empty()) outputs.push_back({cluster_path, "--cluster-out"});
    check_output_paths(inputs, outputs);
  }
  // After every check: a refused run leaves no temporary behind.
  void open() {
    if (!profile_path.empty()) profile = OutputFile(profile_path);
    if (!cluster_path.empty()) cluster = OutputFile(cluster_path);
  }
  static void commit(OutputFile& file, const std::string& text) {
    file.write(text);
    file.commit();
    std::cout << fmt::format("wrote {}\n", file.path());
  }
};

}  // namespace

// `loom profile`: this machine's costs for one config (NOTE [Profile], docs/profile.md), and with
// --cluster-out this machine as a cluster (NOTE [Cluster cost model]).
Action add_profile(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "measure per-layer times and saved bytes, the swap copy bandwidth and the "
                                            "collectives' alpha / beta on this machine, for memory.profile; or this "
                                            "machine as a cluster file for loom simulate and loom plan");
  auto config = std::make_shared<ConfigOptions>();
  auto files = std::make_shared<ProfileFiles>();
  auto options = std::make_shared<train::ProfileOptions>();
  config->add_to(*cmd);
  cmd->add_option("--out", files->profile_path, "write the profile as JSON to FILE (docs/profile.md)");
  cmd->add_option("--cluster-out", files->cluster_path,
                  "write this machine (or the job's hosts) as a cluster to FILE.toml (the `local` cluster; needs 2 ranks "
                  "or more)");
  cmd->add_option("--repeats", options->repeats, "timed runs of each measurement after a warm-up (medians; default 5)");
  return [cmd, config, files, options](dist::Runtime& runtime) {
    if (!*cmd) return;
    dist::Communicator& world = runtime.world();
    const bool cluster = !files->cluster_path.empty();
    options->layers = !files->profile_path.empty() || !cluster;  // the table alone measures the layers too
    Config loaded;
    const std::vector<int> host_of = dist::hosts_of_ranks(world);  // a collective: before any check may throw
    std::exception_ptr failure;
    try {  // every rank checks; all agree before anyone measures (dist/input_agreement.h)
      loaded = config->load();
      options->cluster_threads = loaded.train.threads > 0 ? loaded.train.threads : 1;  // a device's threads
      train::check_profile_input(loaded, world.size(), *options);
      if (world.rank() == 0) files->check(config->inputs(loaded));
      options->devices = runtime.device_backend();
      options->placement = train::place_profile(loaded, world, options->devices);  // NOTE [Devices]
      if (cluster)
        train::check_cluster_input(world.size(), dist::ranks_per_host(host_of), options->placement.device == TrainDevice::Cuda,
                                   train::host_counts(host_of));
      if (world.rank() == 0) files->open();
    } catch (const InputError&) {
      failure = std::current_exception();
    }
    dist::agree_on_input(world, failure);
    const plan::Profile profile = train::measure_profile(loaded, world, *options);
    const plan::Cluster measured = cluster ? train::measure_cluster(loaded, world, *options, profile) : plan::Cluster{};
    if (world.rank() != 0) return;
    std::cout << profile_table(profile);
    if (cluster) std::cout << cluster_table(measured);
    if (files->profile.is_open()) ProfileFiles::commit(files->profile, plan::to_json(profile).dump(2) + "\n");
    if (files->cluster.is_open()) ProfileFiles::commit(files->cluster, cluster_header(measured.kind == DeviceKind::Gpu) + plan::to_toml(measured));
  };
}

}  // namespace loom::cli
