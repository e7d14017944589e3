// NOTE [Cluster cost model]: a cluster file reads back to the same value, the shipped files parse,
// a bad file is refused with one InputError naming the key, and the costs follow the note's
// formulas (ring or tree over the slowest link a group spans; measured alpha / beta inside a node).
// `loom profile --cluster-out`'s pieces that need no second rank are checked here too: the GEMM
// curve's fit and the job it refuses.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/dist/topology.h"
#include "loom/plan/cluster.h"
#include "loom/train/profile_run.h"
#include "unit/input_error.h"

namespace loom::plan {

// So that a failed EXPECT_EQ prints the two clusters as their files would read.
void PrintTo(const Cluster& c, std::ostream* os) { *os << to_toml(c); }

namespace {

using ::testing::HasSubstr;

using loom::testing::input_error;

// Every field set, each value exact in to_toml's 6 significant digits.
Cluster full_cluster() {
  return {.name = "test",
          .source = "unit test",
          .kind = DeviceKind::Cpu,
          .attention_kernel = Fusion::Fused,
          .elementwise_kernel = Fusion::Unfused,
          .devices_per_node = 8,
          .max_nodes = 2,
          .peak_flops = {{DType::BFloat16, 312e12}, {DType::Float32, 19.5e12}},
          .memory_bytes = 80e9,
          .memory_bytes_per_s = 2.039e12,
          .intra_node = {.bytes_per_s = 300e9, .latency_s = 5e-6},
          .inter_node = {.bytes_per_s = 25e9, .latency_s = 10e-6},
          .host_bytes_per_s = 25e9,
          .gemm_max = 0.85,
          .gemm_half_dim = 128,
          .attention_efficiency = 0.5,
          .memory_efficiency = 0.8,
          .overlap = 0.375,
          .collectives = {{.op = CommOp::AllReduce, .ranks = 2, .alpha_s = 4e-6, .beta_s_per_byte = 2.5e-10},
                          {.op = CommOp::SendRecv, .ranks = 2, .alpha_s = 3e-6, .beta_s_per_byte = 1e-10}},
          .measured = Measurement{.unix_time = 1796300000, .ranks = 2, .threads = 3, .loom_version = "0.2.0",
                                  .peak_spread = 0.0625}};
}

// A valid file with `from` replaced by `to` (which must occur once).
std::string edited(const std::string& from, const std::string& to) {
  std::string text = to_toml(full_cluster());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string refusal(const std::string& text) {
  return input_error([&] { cluster_from_toml(text, "bad.toml"); });
}

TEST(Cluster, ReadsBackWhatItWrites) {
  const Cluster c = full_cluster();
  EXPECT_EQ(cluster_from_toml(to_toml(c), "written"), c);
  // Comment lines above it (--cluster-out's header) change nothing.
  EXPECT_EQ(cluster_from_toml("# a header\n# of two lines\n" + to_toml(c), "with header"), c);
}

// [measured] (NOTE [Cached cluster]): optional, its counts whole and at least 1, its keys known.
TEST(Cluster, MeasuredIsOptionalAndChecked) {
  Cluster c = full_cluster();
  c.measured.reset();
  EXPECT_EQ(cluster_from_toml(to_toml(c), "written"), c);
  EXPECT_THAT(refusal(edited("threads = 3", "threads = 0")), HasSubstr("measured.threads = 0 must be a whole number"));
  EXPECT_THAT(refusal(edited("peak_spread = ", "spread = ")), HasSubstr("unknown key measured.spread"));
}

TEST(Cluster, ShippedFilesParse) {
  const Cluster a100 = read_cluster("dgx-a100-80gb");
  EXPECT_EQ(a100.devices_per_node, 8);
  EXPECT_EQ(a100.peak(DType::BFloat16), 312e12);
  EXPECT_EQ(a100.intra_node.bytes_per_s, 300e9);
  EXPECT_EQ(a100.inter_node.bytes_per_s, 25e9);
  EXPECT_EQ(a100.kind, DeviceKind::Gpu);
  const Cluster h100 = read_cluster("dgx-h100");
  EXPECT_EQ(h100.peak(DType::BFloat16), 989e12);
  EXPECT_EQ(h100.attention_kernel, Fusion::Fused);
  EXPECT_EQ(h100.elementwise_kernel, Fusion::Fused);
  EXPECT_EQ(h100.memory_bytes_per_s, 3.35e12);
  // This machine, as `loom profile --cluster-out` measured it: one host, every number measured.
  const Cluster local = read_cluster("local");
  EXPECT_EQ(local.name, "local");
  EXPECT_EQ(local.max_nodes, 1);
  EXPECT_GE(local.devices_per_node, 2);
  EXPECT_GT(local.peak(DType::Float32), 0);
  EXPECT_GT(local.peak(DType::Float64), 0);
  EXPECT_EQ(local.intra_node, local.inter_node);
  EXPECT_EQ(local.kind, DeviceKind::Cpu);
  EXPECT_EQ(local.attention_kernel, Fusion::Unfused);
  EXPECT_FALSE(local.collectives.empty());
}

// `c` as to_toml writes it, without its [kernels] section (the three lines from "[kernels]"),
// and without device.kind's line unless `keep_kind`.
std::string without_kernels(const Cluster& c, bool keep_kind) {
  std::string text = to_toml(c);
  const auto erase_lines = [&](const std::string& from, int lines) {
    size_t end = text.find(from);
    for (int i = 0; i < lines; ++i) end = text.find('\n', end) + 1;
    text.erase(text.find(from), end - text.find(from));
  };
  erase_lines("[kernels]", 3);
  if (!keep_kind) erase_lines("kind = ", 1);
  return text;
}

// NOTE [Kernel fusion]: [kernels] defaults to what device.kind runs, key by key; a file without
// device.kind is a GPU's spec sheet unless loom measured it.
TEST(Cluster, KernelsDefaultToTheDeviceKind) {
  const auto kernels = [](const Cluster& read) { return std::pair(read.attention_kernel, read.elementwise_kernel); };
  Cluster c = full_cluster();
  c.measured.reset();
  const std::pair unfused(Fusion::Unfused, Fusion::Unfused);
  EXPECT_EQ(kernels(cluster_from_toml(without_kernels(c, true), "cpu")), unfused);
  c.kind = DeviceKind::Gpu;
  const std::string gpu = without_kernels(c, true);
  EXPECT_EQ(kernels(cluster_from_toml(gpu, "gpu")), std::pair(Fusion::Fused, Fusion::Fused));
  c.kind = DeviceKind::Cpu;
  const Cluster spec_sheet = cluster_from_toml(without_kernels(c, false), "no kind");
  EXPECT_EQ(spec_sheet.kind, DeviceKind::Gpu);
  EXPECT_EQ(kernels(spec_sheet), std::pair(Fusion::Fused, Fusion::Fused));
  EXPECT_EQ(cluster_from_toml(without_kernels(full_cluster(), false), "measured, no kind").kind, DeviceKind::Cpu);
  // An older `loom profile --cluster-out` wrote neither device.kind nor [measured]: its source says.
  Cluster older = full_cluster();
  older.measured.reset();
  older.source = fmt::format("{} on vm: 2 ranks, one thread each", kMeasuredSource);
  EXPECT_EQ(kernels(cluster_from_toml(without_kernels(older, false), "older")), unfused);
  // One key given, the other from the kind.
  const Cluster one = cluster_from_toml(gpu + "\n[kernels]\nattention = \"unfused\"\n", "one key");
  EXPECT_EQ(kernels(one), std::pair(Fusion::Unfused, Fusion::Fused));
  EXPECT_THAT(refusal(edited("attention = \"fused\"", "attention = \"flash\"")),
              HasSubstr("bad.toml: kernels.attention = \"flash\" is not one of: fused, unfused"));
  EXPECT_THAT(refusal(edited("kind = \"cpu\"", "kind = \"tpu\"")),
              HasSubstr("bad.toml: device.kind = \"tpu\" is not one of: cpu, gpu"));
  EXPECT_THAT(refusal(edited("elementwise = ", "softmax = \"fused\"\nelementwise = ")),
              HasSubstr("bad.toml: unknown key kernels.softmax"));
}

// NOTE [Overlap]: optional (a spec sheet's file leaves it out: all of a collective hides), a share
// from 0 to 1; two activities side by side take the longer plus the unhidden share of the shorter.
TEST(Cluster, OverlapIsAShareOfTheShorterActivity) {
  EXPECT_EQ(cluster_from_toml(edited("overlap = 0.375\n", ""), "no overlap").overlap, 1);
  EXPECT_EQ(cluster_from_toml(edited("overlap = 0.375", "overlap = 0"), "none hides").overlap, 0);
  EXPECT_THAT(refusal(edited("overlap = 0.375", "overlap = 1.25")),
              HasSubstr("bad.toml: efficiency.overlap = 1.25 must be in [0, 1]"));
  EXPECT_THAT(refusal(edited("overlap = 0.375", "overlap = -0.5")), HasSubstr("efficiency.overlap = -0.5"));
  Cluster c = full_cluster();
  for (const auto& [overlap, seconds] : {std::pair{1.0, 3.0}, {0.0, 5.0}, {0.375, 4.25}}) {
    c.overlap = overlap;
    EXPECT_DOUBLE_EQ(c.beside(3, 2), seconds) << overlap;
    EXPECT_DOUBLE_EQ(c.beside(2, 3), seconds) << overlap;  // which of the two computes does not matter
    EXPECT_DOUBLE_EQ(c.beside(3, 0), 3) << overlap;
  }
}

TEST(Cluster, RefusesABadFileNamingTheKey) {
  EXPECT_THAT(refusal(edited("per_node = 8", "per_node = 8\nper_nodes = 8")),
              HasSubstr("bad.toml: unknown key device.per_nodes"));
  EXPECT_THAT(refusal(edited("[device]", "[devices]")), HasSubstr("bad.toml: [device] is missing"));
  EXPECT_THAT(refusal(edited("bandwidth = 2.5e+10", "bandwidth = -1")),
              HasSubstr("bad.toml: links.inter_node.bandwidth = -1 must be a positive number"));
  // Counts are whole numbers in range: a huge one is refused, not cast (a fuzz finding: 3.3e44
  // converted to int64 is undefined behaviour).
  EXPECT_THAT(refusal(edited("per_node = 8", "per_node = 3.3e44")),
              HasSubstr("bad.toml: device.per_node = 3.3e+44 must be a whole number from 1 to 1048576"));
  EXPECT_THAT(refusal(edited("per_node = 8", "per_node = 2.5")),
              HasSubstr("device.per_node = 2.5 must be a whole number"));
  EXPECT_THAT(refusal(edited("gemm_max = 0.85", "gemm_max = 1.5")),
              HasSubstr("bad.toml: efficiency.gemm_max = 1.5 must be in (0, 1]"));
  EXPECT_THAT(refusal(edited("op = \"send_recv\"", "op = \"broadcast\"")),
              HasSubstr("bad.toml: collective.op = \"broadcast\" is not one of: all_reduce"));
  EXPECT_THAT(refusal(edited("name = \"test\"", "name = \"test")), HasSubstr("bad.toml: not a cluster file"));
  EXPECT_THAT(refusal(edited("peak_flops = { ", "peak_flops = { float16 = 1, ")),
              HasSubstr("unknown key device.peak_flops.float16"));
  EXPECT_THAT(input_error([] { read_cluster("no-such-cluster"); }), HasSubstr("no cluster file no-such-cluster"));
}

TEST(Cluster, RefusesMoreGpusThanItHas) {
  const Cluster c = full_cluster();  // 2 nodes of 8
  check_gpus(c, 16);
  EXPECT_THAT(input_error([&] { check_gpus(c, 17); }),
              HasSubstr("--gpus 17 is more than cluster test has (2 nodes x 8 devices = 16)"));
  EXPECT_THAT(input_error([&] { check_gpus(c, 0); }), HasSubstr("--gpus 0 must be at least 1"));
  Cluster unbounded = c;
  unbounded.max_nodes = 0;
  check_gpus(unbounded, 3072);
}

// The ring and the tree of NOTE [Cluster cost model] over each link, without measured costs.
TEST(Cluster, CollectivesFollowTheRingOrTheTree) {
  Cluster c = full_cluster();
  c.collectives.clear();
  const double bytes = 1e9, n = 8, bw = 300e9, lat = 5e-6;
  const double ring = 2 * ((n - 1) / n * bytes / bw + (n - 1) * lat);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 8, bytes, {}), ring);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::ReduceScatter, 8, bytes, {}), ring / 2);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllGather, 8, bytes, {.nodes = true}),
                   (n - 1) / n * bytes / 25e9 + (n - 1) * 10e-6);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::SendRecv, 2, bytes, {.nodes = true}), 10e-6 + bytes / 25e9);
  // A small message over many ranks: the tree's 2 log2 n latencies beat the ring's 2 (n - 1).
  const double small = 1024, many = 64;
  const double tree = 2 * std::log2(many) * lat + 2 * small / bw;
  EXPECT_LT(tree, 2 * ((many - 1) / many * small / bw + (many - 1) * lat));
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 64, small, {}), tree);
  EXPECT_EQ(c.collective_seconds(CommOp::AllReduce, 1, bytes, {}), 0);
}

// Inside a node the measured alpha / beta of the op at the nearest group size at or above; across
// nodes the links.
TEST(Cluster, UsesMeasuredCollectivesInsideANode) {
  Cluster c = full_cluster();
  c.collectives.push_back({.op = CommOp::AllReduce, .ranks = 4, .alpha_s = 8e-6, .beta_s_per_byte = 5e-10});
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 2, 1e6, {}), 4e-6 + 2.5e-10 * 1e6);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 3, 1e6, {}), 8e-6 + 5e-10 * 1e6);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 8, 1e6, {}), 8e-6 + 5e-10 * 1e6);  // the largest
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::SendRecv, 2, 1e6, {}), 3e-6 + 1e-10 * 1e6);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::SendRecv, 2, 1e6, {.nodes = true}), 10e-6 + 1e6 / 25e9);
  // An op never measured: the ring over the link.
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllGather, 2, 1e6, {}), 0.5 * 1e6 / 300e9 + 5e-6);
}

TEST(Cluster, GroupsSpanNodesByTheMeshOrder) {
  EXPECT_FALSE(group_spans_nodes(dist::MeshDegrees{.tp = 8}, {"tp"}, 8));
  EXPECT_FALSE(group_spans_nodes(dist::MeshDegrees{.dp = 2, .pp = 2, .tp = 8}, {"tp"}, 8));
  EXPECT_TRUE(group_spans_nodes(dist::MeshDegrees{.dp = 2, .pp = 2, .tp = 8}, {"dp"}, 8));
  EXPECT_TRUE(group_spans_nodes(dist::MeshDegrees{.dp = 2, .pp = 2, .tp = 8}, {"pp"}, 8));  // stage neighbours on two nodes
  EXPECT_FALSE(group_spans_nodes(dist::MeshDegrees{.pp = 2, .tp = 4}, {"pp"}, 8));         // both stages on one node
  EXPECT_TRUE(group_spans_nodes(dist::MeshDegrees{.dp = 2, .tp = 4}, {"dp"}, 4));
  EXPECT_FALSE(group_spans_nodes(dist::MeshDegrees{.dp = 2, .sp = 2, .tp = 2}, {"dp", "sp"}, 8));
  EXPECT_TRUE(group_spans_nodes(dist::MeshDegrees{.dp = 2, .sp = 2, .tp = 2}, {"dp", "sp"}, 4));
}

// NOTE [Hierarchical all-reduce]: a group takes the levels where it lies on 2 nodes or more with as
// many of its ranks on each, 2 or more.
TEST(Cluster, GroupsTakeTheLevelsWhereEachNodeHoldsAsManyOfThem) {
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 4}, {"dp"}, 2), 2);
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 8}, {"dp"}, 2), 4);
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 4}, {"dp"}, 4), 0);          // one node
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 4}, {"dp"}, 1), 0);          // one rank per node
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 2, .tp = 2}, {"dp"}, 2), 0);  // {0, 2}: one on each
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 3}, {"dp"}, 2), 0);          // 2 and 1
  EXPECT_EQ(group_levels_nodes(dist::MeshDegrees{.dp = 2, .sp = 2, .tp = 2}, {"dp", "sp"}, 4), 2);
}

// The levels: the leaders' ring over the nodes' link once per piece, S for a buffer of S at 2 nodes
// where the flat ring sends 1.5 S, while the within-node steps hide under it; each piece's
// latencies count; a node slower than the link sets the time.
TEST(Cluster, LevelsCostTheLinkOncePerPieceWhereTheNodeIsFaster) {
  Cluster c = full_cluster();
  c.collectives.clear();
  c.inter_node = {.bytes_per_s = 125e6, .latency_s = 50e-6};  // the test cluster's shaped link
  const double bytes = 64.0 * (1 << 20), piece = 1 << 20, pieces = 64;
  const double flat = c.collective_seconds(CommOp::AllReduce, 4, bytes, {.nodes = true});
  EXPECT_DOUBLE_EQ(flat, 2 * (0.75 * bytes / 125e6 + 3 * 50e-6));
  const double levels = c.collective_seconds(CommOp::AllReduce, 4, bytes, {.nodes = true, .levels = 2});
  EXPECT_DOUBLE_EQ(levels, c.levels_all_reduce_seconds(4, 2, bytes));
  const double cross = pieces * 2 * (0.5 * piece / 125e6 + 50e-6);  // each piece's ring of 2 leaders
  EXPECT_GT(levels, cross);
  EXPECT_LT(levels, cross * 1.01);
  EXPECT_NEAR(flat / levels, 1.5, 0.03);
  c.inter_node = {.bytes_per_s = 25e9, .latency_s = 10e-6};  // fast: the pieces' latencies show
  EXPECT_GT(c.collective_seconds(CommOp::AllReduce, 4, bytes, {.nodes = true, .levels = 2}), bytes / 25e9 + pieces * 2 * 10e-6);
  c.intra_node.bytes_per_s = 1e9;  // a node slower than the link: each piece's copies within it
  EXPECT_GT(c.collective_seconds(CommOp::AllReduce, 4, bytes, {.nodes = true, .levels = 2}), 2 * bytes / 1e9);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 4, bytes, {.levels = 2}),
                   c.collective_seconds(CommOp::AllReduce, 4, bytes, {}));  // within one node: no levels
}

// NOTE [Node link]: the groups of an axis with ranks on a node share its link. On 2 nodes of 2
// devices, dp 2 x tp 2's two dp groups cross at once, each at half the node's rate; dp 4's levels
// send one flow per node, and pp 2 x dp 2's dp groups, one rank per node each, share it too. A file
// without links.node gives each device its own link, as before; it reads back and is refused
// negative.
TEST(Cluster, GroupsCrossingANodeAtOnceShareItsLink) {
  Cluster c = full_cluster();
  c.collectives.clear();
  c.kind = DeviceKind::Cpu;
  c.devices_per_node = 2;
  c.inter_node = {.bytes_per_s = 125e6, .latency_s = 0};
  c.node_bytes_per_s = 130e6;
  const GroupSpan dp_tp = group_span(dist::MeshDegrees{.dp = 2, .tp = 2}, {"dp"}, c);
  EXPECT_EQ(dp_tp.nodes, true);
  EXPECT_EQ(dp_tp.levels, 0);
  EXPECT_EQ(dp_tp.sharing, 2);
  const GroupSpan dp4 = group_span(dist::MeshDegrees{.dp = 4}, {"dp"}, c);
  EXPECT_EQ(dp4.levels, 2);
  EXPECT_EQ(dp4.sharing, 1);
  EXPECT_EQ(group_span(dist::MeshDegrees{.dp = 2, .pp = 2}, {"dp"}, c).sharing, 2);
  // A group inside dp x sp, by its members: dp 2 x sp 2 with ep 2 has each expert's replicas on
  // {0, 1} (within a node); every other rank, {0, 2}, crosses with a neighbour group.
  EXPECT_EQ(group_of_rank0(dist::MeshDegrees{.dp = 2, .sp = 2}, {"dp", "sp"}), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(members_span({0, 1}, c).nodes, false);
  EXPECT_EQ(members_span({0, 2}, c).sharing, 2);
  EXPECT_EQ(members_span({0, 2}, c).levels, 0);
  const GroupSpan tp = group_span(dist::MeshDegrees{.dp = 2, .tp = 2}, {"tp"}, c);
  EXPECT_EQ(tp.nodes, false);
  EXPECT_EQ(tp.sharing, 1);
  const double bytes = 8e6;
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 2, bytes, dp_tp), bytes / 65e6);
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 2, bytes, {.nodes = true}), bytes / 125e6);
  EXPECT_DOUBLE_EQ(c.crossing_link(4).bytes_per_s, 32.5e6);
  // The levels' leaders of two groups per node (dp 4 x tp 2 over nodes of 4): the link-bound
  // stage at 65 MB/s instead of 125.
  EXPECT_NEAR(c.levels_all_reduce_seconds(4, 2, 64e6, 2) / c.levels_all_reduce_seconds(4, 2, 64e6, 1), 125.0 / 65, 0.01);
  c.node_bytes_per_s = 0;  // each device its own link
  EXPECT_DOUBLE_EQ(c.collective_seconds(CommOp::AllReduce, 2, bytes, dp_tp), bytes / 125e6);
  Cluster shared = full_cluster();
  shared.node_bytes_per_s = 4e10;
  EXPECT_EQ(cluster_from_toml(to_toml(shared), "written"), shared);
  EXPECT_THAT(to_toml(full_cluster()), ::testing::Not(HasSubstr("\nnode =")));
  EXPECT_THAT(refusal(edited("host = ", "node = -1\nhost = ")), HasSubstr("bad.toml: links.node = -1 must be zero or positive"));
}

// `loom profile --cluster-out`'s curve: a measured e(d) = 0.9 d / (d + 100) is recovered; one above
// the peak clamps gemm_max to 1; one falling with d clamps the half dimension to (about) 0.
TEST(Cluster, FitsTheGemmCurve) {
  std::vector<double> dims{32, 64, 128, 256, 512, 1024}, efficiency;
  for (double d : dims) efficiency.push_back(0.9 * d / (d + 100));
  train::GemmCurve curve = train::fit_gemm_curve(dims, efficiency);
  EXPECT_NEAR(curve.gemm_max, 0.9, 1e-9);
  EXPECT_NEAR(curve.gemm_half_dim, 100, 1e-6);
  curve = train::fit_gemm_curve({64, 1024}, {1.2, 1.3});
  EXPECT_EQ(curve.gemm_max, 1);
  EXPECT_GT(curve.gemm_half_dim, 0);
  curve = train::fit_gemm_curve({64, 1024}, {0.9, 0.8});
  EXPECT_GT(curve.gemm_max, 0.75);
  EXPECT_LT(curve.gemm_max, 0.8);
  EXPECT_NEAR(curve.gemm_half_dim, 0, 1e-9);
}

TEST(Cluster, ProfileRefusesAJobThatCannotMeasureTheMachine) {
  EXPECT_THAT(input_error([] { train::check_cluster_input(1, 1, false); }),
              HasSubstr("--cluster-out on CPUs needs 2 ranks or more (its links are their send_recv), but the job "
                        "has 1"));
  EXPECT_THAT(input_error([] { train::check_cluster_input(4, 0, true, train::host_counts({0, 0, 0, 3})); }),
              HasSubstr("describes nodes of as many ranks each, numbered consecutively, but the job's hosts hold 3, 1 "
                        "ranks"));
  train::check_cluster_input(2, 2, false);
  train::check_cluster_input(4, 2, false);  // 2 hosts x 2
  train::check_cluster_input(1, 1, true);  // one GPU: its links are its host link
}

// NOTE [Hosts in the mesh]: a cluster's nodes are blocks of consecutive ranks, as many on each.
TEST(Cluster, RanksPerHostNeedsEqualConsecutiveBlocks) {
  EXPECT_EQ(dist::ranks_per_host({0}), 1);
  EXPECT_EQ(dist::ranks_per_host({0, 0, 0, 0}), 4);
  EXPECT_EQ(dist::ranks_per_host({0, 0, 2, 2}), 2);
  EXPECT_EQ(dist::ranks_per_host({0, 1, 2}), 1);
  EXPECT_EQ(dist::ranks_per_host({0, 0, 0, 3}), 0);     // 3 and 1
  EXPECT_EQ(dist::ranks_per_host({0, 1, 0, 1}), 0);     // interleaved (mpirun --map-by node)
  EXPECT_EQ(dist::ranks_per_host({0, 0, 2, 2, 2, 2}), 0);  // 2 and 4
  EXPECT_EQ(train::host_counts({0, 0, 2, 3, 3}), "2, 1, 2");
}

}  // namespace
}  // namespace loom::plan
