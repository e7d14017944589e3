#pragma once
// NOTE [Cluster cost model]: what a layout's step costs on a given cluster, from numbers a user
// knows before running (a spec sheet, or `loom profile --cluster-out` on this machine), as a TOML
// file under clusters/ (docs/planner.md):
//   devices     per node; each device's dense FLOP/s per dtype, memory bytes and bandwidth
//   links       per device and direction: inside a node and between nodes (bandwidth, latency),
//               and to host memory (the swap tier)
//   efficiency  GEMMs reach gemm_max x d / (d + gemm_half_dim) of the peak, d the smallest
//               dimension of the layer's largest GEMM (1/efficiency is linear in 1/d: a fit of
//               measured GEMMs, or a documented curve for a GPU); the attention kernel reaches
//               attention_efficiency; non-GEMM kernels move their bytes at memory_efficiency of
//               the memory bandwidth
//   collectives optional measured alpha/beta per (op, group size): used as they are for groups
//               inside one node (this machine's `local`); otherwise ring (all-reduce: 2 (n-1)/n
//               bytes / bw + 2 (n-1) latency; all-gather, reduce-scatter, all-to-all: half that)
//               or tree (2 log2 n latency + 2 bytes / bw), whichever is faster, over the slowest
//               link the group spans
//   kernels     which kernels the device runs (NOTE [Kernel fusion]), by default those of its kind
//   node link   links.node: a node's link to the others, each direction, which the devices that
//               cross at once share (NOTE [Node link]); absent, each device has its own
//   overlap     efficiency.overlap: the share of a collective's time that hides under compute issued
//               beside it (NOTE [Overlap]); 1 where absent
// A layer's pass then costs gemm + attention + elementwise + its collectives (those issued beside
// the compute overlap it: Cluster::beside).
//
// NOTE [Node link]
// links.inter_node is one device's link, each direction. Where the devices of a node share one
// network link (a host of several CPU ranks, GPUs behind one NIC), the groups of an axis that cross
// at once split it: dp 2 x tp 2 on 2 hosts of 2 ranks runs two dp all-reduces between the hosts at
// once, each at half the host's rate, where dp 4's levels send one flow per host. links.node is
// that whole rate; a group's collective across nodes gets min(inter_node, node / sharing), sharing
// being how many groups of its axis have ranks on a node (GroupSpan: each crosses a node's link
// once, a ring's pass or the levels' leader). `loom profile --cluster-out` measures it with every
// rank of the first host sending to its peer on the second at once.
//
// NOTE [Overlap]
// Communication beside compute (gradient buckets under the backward, ZeRO's gathers, a layer's
// overlapped tp collectives) hides under it only as far as the device keeps both going. A GPU's
// copy engines and NCCL's kernels move the bytes while the SMs compute: nearly all of it hides.
// A CPU's ranks need their cores for both: the sums, the copies into the transport, and, with Open
// MPI, the progress itself, which moves only inside an MPI call (NOTE [Progress]: between layers).
// Where ranks outnumber the cores, as 4 ranks on 2 here, almost nothing hides. So the cluster says
// how much does: two activities of a and b seconds side by side take
//   max(a, b) + (1 - overlap) x min(a, b)
// (overlap 1: the longer of the two; 0: one after the other). `loom profile --cluster-out` measures
// it on the job's ranks (measure_overlap: an all-reduce over the world beside GEMMs, tested between
// them as the reducer tests between layers); a spec sheet's file leaves it out (1).
//
// NOTE [Kernel fusion]
// The same layer moves different bytes on different kernels. "unfused" prices every pass through
// memory as loom's tiled CPU kernel makes them: attention's score tiles written, widened, reduced
// and read again (4a + 24 bytes per score for a-byte products, nn::causal_attention_score_bytes),
// and each elementwise operation reading and writing its operands. It is how `loom profile`
// measured a CPU's attention share (the score passes taken out), so a CPU's file keeps it even
// where its runs use libtorch's fused CPU attention (model.attn_kernel = "fused"). A GPU run uses fused attention (flash / memory-
// efficient: the scores stay in on-chip memory, and the attention's time is its FLOPs at
// efficiency.attention) and fused elementwise kernels (bias with activation, rotary in one pass,
// no copies to and from the heads' layout, a cross-entropy that writes its gradient in place of
// the logits). A layer's nn::Cost says both: elementwise_bytes as unfused kernels move them,
// fusable_bytes what fused ones do not, score_bytes what fused attention does not. The cluster
// file says which kernels its runs use ([kernels] attention, elementwise = "fused" | "unfused");
// absent, device.kind decides: a gpu fuses both, a cpu neither.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/options.h"
#include "loom/dist/mesh.h"
#include "loom/nn/layer.h"

namespace loom::plan {

struct LinkSpec {
  double bytes_per_s = 0;  // per device, each direction
  double latency_s = 0;
  bool operator==(const LinkSpec&) const = default;
};

struct MeasuredCollective {
  nn::CommOp op = nn::CommOp::AllReduce;
  int64_t ranks = 2;
  double alpha_s = 0, beta_s_per_byte = 0;
  bool operator==(const MeasuredCollective&) const = default;
};

// How a measured cluster was measured ([measured]; `loom profile --cluster-out` and parallel.auto's
// cache write it, NOTE [Cached cluster]; a spec sheet's file has none).
struct Measurement {
  int64_t unix_time = 0;     // when: seconds since 1970-01-01 UTC
  int64_t ranks = 1;         // the job's ranks, measuring at once
  int64_t threads = 1;       // intra-op threads each rank measured with
  std::string loom_version;  // the loom that measured (key `loom`)
  double peak_spread = 0;    // the float32 peak's repeats: (largest - smallest) / median
  bool operator==(const Measurement&) const = default;
};

// One pass of a layer on one device, as Cluster::compute_seconds prices it (NOTE [Kernel fusion]).
struct PassWork {
  double gemm_flops = 0;  // the attention's excluded
  double gemm_dim = 0;    // the smallest dimension of the largest GEMM
  double attention_flops = 0;
  double elementwise_bytes = 0;  // as unfused kernels move them
  double fusable_bytes = 0;      // the part of elementwise_bytes that fused kernels do not move
  double score_bytes = 0;        // the attention scores' passes, which fused attention does not make
};

// Where a collective's group lies on the nodes (group_span).
struct GroupSpan {
  bool nodes = false;   // it spans more than one node
  int64_t levels = 0;   // group_levels_nodes: its all-reduce takes the levels over this many nodes
  int64_t sharing = 1;  // the groups of its axis whose flows cross a node's link at once (NOTE [Node link])
};

struct Cluster {
  std::string name;
  std::string source;  // where the numbers come from
  DeviceKind kind = DeviceKind::Gpu;
  Fusion attention_kernel = Fusion::Fused, elementwise_kernel = Fusion::Fused;
  int64_t devices_per_node = 1;
  int64_t max_nodes = 0;                   // 0: as many as asked
  std::map<DType, double> peak_flops;      // dense FLOP/s per dtype the device runs
  double memory_bytes = 0;                 // per device
  double memory_bytes_per_s = 0;
  LinkSpec intra_node, inter_node;
  double node_bytes_per_s = 0;             // NOTE [Node link]; 0: each device has its own
  double host_bytes_per_s = 0;             // the swap tier's copies, each way
  double gemm_max = 1, gemm_half_dim = 0;  // GEMM efficiency curve
  double attention_efficiency = 1;
  double memory_efficiency = 1;
  double overlap = 1;                      // NOTE [Overlap]
  std::vector<MeasuredCollective> collectives;
  std::optional<Measurement> measured;
  bool operator==(const Cluster&) const = default;

  // InputError naming the dtype when the device has no peak for it.
  double peak(DType dtype) const;
  double gemm_efficiency(double gemm_dim) const;
  // One pass of a layer on this cluster's kernels.
  double compute_seconds(const PassWork& work, DType dtype) const;
  // NOTE [Overlap]: compute and communication of these lengths, issued side by side.
  double beside(double compute_s, double comm_s) const;
  // One collective of `bytes` over `ranks` ranks whose group lies as `span` says: inside one node,
  // or across nodes (each device's link, or its share of the node's), through the levels where its
  // all-reduce takes them (span.levels: 2 or more).
  double collective_seconds(nn::CommOp op, int64_t ranks, double bytes, const GroupSpan& span) const;
  // The link a group across nodes crosses, its bandwidth the device's or its share of the node's.
  LinkSpec crossing_link(int64_t sharing) const;
  // NOTE [Hierarchical all-reduce]: the pieces through the within-node steps and the leaders'
  // all-reduce across the nodes, one stage under the other: the slower stage's time for each piece
  // (its latencies included), the faster one's once.
  double levels_all_reduce_seconds(int64_t ranks, int64_t nodes, double bytes, int64_t sharing = 1) const;
};

// The mesh's groups on nodes of `devices_per_node` consecutive ranks (NOTE [Mesh axes]' order):
// whether the group over `axes` (names of the mesh's axes, e.g. {"dp", "sp"}) containing rank 0
// spans more than one node ({"pp"}: whether the pipeline's stages sit on different nodes).
bool group_spans_nodes(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes,
                       int64_t devices_per_node);
// The nodes that group spans when its all-reduce takes the levels (NOTE [Hierarchical all-reduce]:
// 2 nodes or more, as many of its ranks on each, 2 or more); 0 when it does not. The levels are
// the MPI backend's: only a CPU cluster's groups take them (GPU tensors all-reduce through NCCL).
int64_t group_levels_nodes(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes,
                           int64_t devices_per_node);

// The ranks of the group over `axes` containing rank 0, rising (NOTE [Mesh axes]' order).
std::vector<int64_t> group_of_rank0(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes);
// How a group of these ranks (rank 0 first) lies on `cluster`'s nodes, its all-reduce taking the
// levels over `levels` nodes (group_levels_nodes' answer for it, or 0).
GroupSpan members_span(const std::vector<int64_t>& members, const Cluster& cluster, int64_t levels = 0);
// How the group over `axes` containing rank 0 lies on `cluster`'s nodes (the three above).
GroupSpan group_span(const dist::MeshShape& mesh, std::initializer_list<std::string_view> axes, const Cluster& cluster);
// The groups whose flows share a node's link, for a group with `on_node` of its ranks on a node.
int64_t node_sharing(int64_t devices_per_node, int64_t on_node);

// A cluster by name (clusters/NAME.toml in the working directory, then in loom's own clusters/)
// or by path (containing '/' or ending in ".toml"). InputError for a missing or malformed file,
// naming the file, the key and the value.
Cluster read_cluster(const std::string& name_or_path);
Cluster cluster_from_toml(const std::string& text, const std::string& where);
std::string to_toml(const Cluster& cluster);

// How `loom profile --cluster-out` begins a cluster's source.
inline constexpr std::string_view kMeasuredSource = "measured by `loom profile --cluster-out`";

// `gpus` against the cluster (at most devices_per_node x max_nodes): InputError otherwise.
void check_gpus(const Cluster& cluster, int64_t gpus);

}  // namespace loom::plan
