#include <nlohmann/json.hpp>

#include <iostream>

#include "commands.h"
#include "config_options.h"
#include "loom/core/error.h"
#include "loom/dist/input_agreement.h"
#include "loom/train/profile_run.h"

namespace loom::cli {
namespace {

// What a person reads: per layer its times and saved bytes, then the copies and the collectives.
std::string profile_table(const plan::Profile& p) {
  std::string text = fmt::format("{:<28} {:>10} {:>10} {:>10} {:>10}\n", "layer", "fwd ms", "bwd-in ms", "bwd-w ms",
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
  text += fmt::format("copy: device -> host {:.2f} GB/s, host -> device {:.2f} GB/s ({} threads)\n",
                      p.device_to_host_bytes_per_s / 1e9, p.host_to_device_bytes_per_s / 1e9, p.threads);
  for (const plan::CollectiveProfile& c : p.collectives)
    text += fmt::format("{:<15} {} ranks: alpha {:.1f} us, 1/beta {:.2f} GB/s\n", c.op, c.ranks, c.alpha_s * 1e6,
                        1e-9 / c.beta_s_per_byte);
  return text;
}

}  // namespace

// `loom profile`: this machine's costs for one config (NOTE [Profile], docs/profile.md).
Action add_profile(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "measure per-layer times and saved bytes, the swap copy bandwidth and the "
                                            "collectives' alpha / beta on this machine, for memory.profile");
  auto config = std::make_shared<ConfigOptions>();
  auto out_path = std::make_shared<std::string>();
  auto options = std::make_shared<train::ProfileOptions>();
  config->add_to(*cmd);
  cmd->add_option("--out", *out_path, "write the profile as JSON to FILE (docs/profile.md)");
  cmd->add_option("--repeats", options->repeats, "timed runs of each measurement after a warm-up (medians; default 5)");
  return [cmd, config, out_path, options](dist::Runtime& runtime) {
    if (!*cmd) return;
    dist::Communicator& world = runtime.world();
    Config loaded;
    OutputFile out;
    std::exception_ptr failure;
    try {  // every rank checks; all agree before anyone measures (dist/input_agreement.h)
      loaded = config->load();
      train::check_profile_input(loaded, world.size(), *options);
      if (world.rank() == 0 && !out_path->empty()) {
        check_output_paths(config->inputs(loaded), {{*out_path, "--out"}});
        out = OutputFile(*out_path);
      }
    } catch (const InputError&) {
      failure = std::current_exception();
    }
    dist::agree_on_input(world, failure);
    const plan::Profile profile = train::measure_profile(loaded, world, *options);
    if (world.rank() != 0) return;
    std::cout << profile_table(profile);
    if (out.is_open()) {
      out.write(plan::to_json(profile).dump(2) + "\n");
      out.commit();
      std::cout << fmt::format("wrote {}\n", *out_path);
    }
  };
}

}  // namespace loom::cli
