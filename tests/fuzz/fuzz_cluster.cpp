// Cluster files (plan/cluster.h, `--cluster NAME|PATH`): the TOML text, then read from a file, and
// the value used as the planner uses it.
// Contract (NOTE [Reader contract]) plus the value's invariants (whole device and node counts of
// at least 1 and 0, positive finite rates, efficiencies in (0, 1], groups of 2 or more ranks), and
// every cost it gives for a layout is a number, not negative (a tiny rate may make one infinite).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/plan/cluster.h"

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }
bool fraction(double v) { return v > 0 && v <= 1; }

void check_value(const loom::plan::Cluster& c) {
  loom::fuzz::require(!c.name.empty() && c.devices_per_node >= 1 && c.max_nodes >= 0, "name, devices or nodes out of range");
  loom::fuzz::require(!c.peak_flops.empty(), "no peak");
  for (const auto& [dtype, flops] : c.peak_flops) loom::fuzz::require(positive(flops), "a peak out of range");
  loom::fuzz::require(positive(c.memory_bytes) && positive(c.memory_bytes_per_s) && positive(c.host_bytes_per_s) &&
                          positive(c.intra_node.bytes_per_s) && positive(c.inter_node.bytes_per_s) &&
                          std::isfinite(c.intra_node.latency_s) && c.intra_node.latency_s >= 0 &&
                          std::isfinite(c.inter_node.latency_s) && c.inter_node.latency_s >= 0,
                      "a rate or latency out of range");
  loom::fuzz::require(fraction(c.gemm_max) && fraction(c.attention_efficiency) && fraction(c.memory_efficiency) &&
                          std::isfinite(c.gemm_half_dim) && c.gemm_half_dim >= 0,
                      "an efficiency out of range");
  for (const loom::plan::MeasuredCollective& m : c.collectives)
    loom::fuzz::require(m.ranks >= 2 && std::isfinite(m.alpha_s) && m.alpha_s >= 0 && std::isfinite(m.beta_s_per_byte) &&
                            m.beta_s_per_byte >= 0,
                        "a measured collective out of range");
}

// The costs the planner asks of a cluster, for a layout of 8 ranks on as many nodes as it takes.
void use(const loom::plan::Cluster& c) {
  for (int64_t gpus : {int64_t{1}, int64_t{8}, c.devices_per_node, c.devices_per_node + 1}) {
    try {
      loom::plan::check_gpus(c, gpus);
    } catch (const loom::InputError&) {
    }
  }
  const loom::dist::MeshShape mesh = loom::dist::MeshDegrees{.dp = 2, .pp = 2, .sp = 1, .tp = 2};
  for (const auto axes : {std::initializer_list<std::string_view>{"tp"}, {"sp"}, {"pp"}, {"dp"}, {"dp", "sp"}})
    (void)loom::plan::group_span(mesh, axes, c);
  for (const auto& [dtype, flops] : c.peak_flops) {
    const double t = c.compute_seconds({.gemm_flops = 1e12, .gemm_dim = 1024, .attention_flops = 1e11,
                                        .elementwise_bytes = 1e9, .fusable_bytes = 5e8, .score_bytes = 1e9},
                                       dtype);
    loom::fuzz::require(!std::isnan(t) && t >= 0, "a compute time is NaN or negative");
  }
  for (auto op : {loom::CommOp::AllReduce, loom::CommOp::AllGather, loom::CommOp::SendRecv})
    for (bool spans : {false, true}) {
      const double t = c.collective_seconds(op, 4, 1e6, {.nodes = spans, .levels = spans ? 2 : 0, .sharing = 2});
      loom::fuzz::require(!std::isnan(t) && t >= 0, "a collective time is NaN or negative");
    }
}

void check(std::string_view input) {
  const std::string text(input);
  const loom::plan::Cluster c = loom::plan::cluster_from_toml(text, "fuzz.toml");
  check_value(c);
  loom::fuzz::require(loom::plan::read_cluster(loom::fuzz::Scratch::write("cluster.toml", text)) == c,
                      "read_cluster and cluster_from_toml disagree");
  use(c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
