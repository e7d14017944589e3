#pragma once
// NOTE [Option names]
// Every enumerated option of the config is an enum with one name table (OptionNames<E>): the
// parser reads a name through it, `config --print` writes it, an unknown name is refused with the
// accepted ones listed, and docs/config.md lists the same names. Code compares the enum values; a
// name appears only in its table. Option<E> is the config's field type: the enum, plus
// construction from a name (checked against the table) so a test can write
// `c.parallel.sp_mode = "ring"`.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

template <class E>
struct OptionNames;  // static constexpr std::array<std::string_view, N> names, in enum order

enum class DType : uint8_t { Float32, Float64, BFloat16 };
template <>
struct OptionNames<DType> {
  static constexpr std::array<std::string_view, 3> names{"float32", "float64", "bfloat16"};
};

// model.bf16_products (NOTE [bf16 products]): how a CPU rank multiplies bfloat16 operands. auto:
// natively where the CPU has bfloat16 dot-product instructions and libtorch uses them, widened to
// float32 elsewhere; native: libtorch's bfloat16 kernels (refused on a CPU without them); widened:
// the operands widened to float32 in blocks, the float32 GEMM, the result rounded once.
enum class Bf16Products : uint8_t { Auto, Native, Widened };
template <>
struct OptionNames<Bf16Products> {
  static constexpr std::array<std::string_view, 3> names{"auto", "native", "widened"};
};

// parallel.sp_mode (NOTE [Sequence parallelism]).
enum class SpMode : uint8_t { AllGather, Ring, Ulysses };
template <>
struct OptionNames<SpMode> {
  static constexpr std::array<std::string_view, 3> names{"allgather", "ring", "ulysses"};
};

// model.attn_kernel (NOTE [Attention kernels]): libtorch's fused causal attention wherever it
// applies (a sequence's queries against its own keys), loom's tiled kernel elsewhere; or the
// tiled kernel everywhere.
enum class AttnKernel : uint8_t { Fused, Tiled };
template <>
struct OptionNames<AttnKernel> {
  static constexpr std::array<std::string_view, 2> names{"fused", "tiled"};
};

// model.moe_score (NOTE [Expert routing]): how the gate's logits become the experts' scores.
enum class MoeScore : uint8_t { Softmax, Sigmoid };
template <>
struct OptionNames<MoeScore> {
  static constexpr std::array<std::string_view, 2> names{"softmax", "sigmoid"};
};

// model.moe_balance (NOTE [Expert balance]): how the experts' loads are evened out. "aux" by the
// auxiliary loss alone; "bias" also by a per-expert bias on the choice, moved after every step
// against the step's loads (auxiliary-loss-free balancing).
enum class MoeBalance : uint8_t { Aux, Bias };
template <>
struct OptionNames<MoeBalance> {
  static constexpr std::array<std::string_view, 2> names{"aux", "bias"};
};

// memory.recompute.
enum class Recompute : uint8_t { None, Full, StageAware };
template <>
struct OptionNames<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"none", "full", "stage-aware"};
};

// parallel.sparse (NOTE [Sparse exchange]): "auto" chooses per table by measured trials, "on" puts
// every table on the sparse path, "off" keeps every table in the dense all-reduce.
enum class SparseMode : uint8_t { Auto, On, Off };
template <>
struct OptionNames<SparseMode> {
  static constexpr std::array<std::string_view, 3> names{"auto", "on", "off"};
};

// train.table_update: the math of a table's AdamW step, whichever exchange carries its gradient.
// "dense" updates every row (untouched rows see a zero gradient: exactly AdamW); "lazy" updates
// only the rows the step looked up (LazyAdam).
enum class TableUpdate : uint8_t { Dense, Lazy };
template <>
struct OptionNames<TableUpdate> {
  static constexpr std::array<std::string_view, 2> names{"dense", "lazy"};
};

// parallel.grad_dtype: the width gradients cross the dp/sp all-reduce (and ZeRO's reduce-scatter)
// in; accumulation and the optimizer stay float32 (NOTE [Mixed precision]).
enum class GradDType : uint8_t { Float32, BFloat16 };
template <>
struct OptionNames<GradDType> {
  static constexpr std::array<std::string_view, 2> names{"float32", "bfloat16"};
};

// data.token_dtype (NOTE [Token width]).
enum class TokenWidth : uint8_t { Auto, UInt16, UInt32 };
template <>
struct OptionNames<TokenWidth> {
  static constexpr std::array<std::string_view, 3> names{"auto", "uint16", "uint32"};
};

// The generators of parallel.schedule (schedule/schedule.h); "csv:PATH" names a file instead.
// zb-v and dualpipe-v place two chunks per rank in a V (NOTE [V-shaped pipelines]).
enum class ScheduleKind : uint8_t { GPipe, OneFOneB, Interleaved, ZbH1, Scp, ZbV, DualPipeV };
template <>
struct OptionNames<ScheduleKind> {
  static constexpr std::array<std::string_view, 7> names{"gpipe", "1f1b", "interleaved", "zb-h1",
                                                         "scp",   "zb-v", "dualpipe-v"};
};
// Whether a kind places its chunks in a V (two per rank: rank r holds virtual stages r and
// 2p - 1 - r).
constexpr bool v_shaped(ScheduleKind kind) { return kind == ScheduleKind::ZbV || kind == ScheduleKind::DualPipeV; }
// The same for parallel.schedule as written (a kind's name, or "csv:PATH": its file says).
constexpr bool v_shaped(std::string_view schedule) {
  for (size_t k = 0; k < OptionNames<ScheduleKind>::names.size(); ++k)
    if (OptionNames<ScheduleKind>::names[k] == schedule) return v_shaped(static_cast<ScheduleKind>(k));
  return false;
}

// memory.swap (NOTE [Swap tier]): "all" moves every layer's saved activations to the host tier
// after its forward and back before its backward.
enum class Swap : uint8_t { None, All };
template <>
struct OptionNames<Swap> {
  static constexpr std::array<std::string_view, 2> names{"none", "all"};
};

// memory.policy (NOTE [Memory cost model]): "manual" applies memory.recompute and memory.swap as
// written; "auto" chooses keep / recompute / swap per layer and stage to fit memory.budget.
enum class PolicyMode : uint8_t { Manual, Auto };
template <>
struct OptionNames<PolicyMode> {
  static constexpr std::array<std::string_view, 2> names{"manual", "auto"};
};

// parallel.partition (NOTE [Memory cost model]): stage cuts that balance compute, balance each
// stage's peak memory, or the fastest that fits, searched between the two.
enum class Partition : uint8_t { Compute, Memory, Auto };
template <>
struct OptionNames<Partition> {
  static constexpr std::array<std::string_view, 3> names{"compute", "memory", "auto"};
};

// The collectives a layer runs and a cluster file prices (NOTE [Cluster cost model]), named as
// `loom profile` writes them.
enum class CommOp : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };
template <>
struct OptionNames<CommOp> {
  static constexpr std::array<std::string_view, 5> names{"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                         "send_recv"};
};

// train.device (NOTE [Devices]): where a rank's tensors live; "auto": a GPU when one is visible.
enum class TrainDevice : uint8_t { Cpu, Cuda, Auto };
template <>
struct OptionNames<TrainDevice> {
  static constexpr std::array<std::string_view, 3> names{"cpu", "cuda", "auto"};
};

// parallel.backend (NOTE [Devices]): what carries the collectives. "nccl" needs GPU tensors and a
// GPU per rank; "mpi" takes any tensors (GPU ones through host buffers); "auto": NCCL where it can.
enum class Backend : uint8_t { Auto, Mpi, Nccl };
template <>
struct OptionNames<Backend> {
  static constexpr std::array<std::string_view, 3> names{"auto", "mpi", "nccl"};
};

// A cluster file's device.kind (NOTE [Cluster cost model]): what its devices are, which sets the
// kernels it is priced with unless its [kernels] section says otherwise.
enum class DeviceKind : uint8_t { Cpu, Gpu };
template <>
struct OptionNames<DeviceKind> {
  static constexpr std::array<std::string_view, 2> names{"cpu", "gpu"};
};

// A cluster file's kernels.attention and kernels.elementwise (NOTE [Kernel fusion]): "fused" keeps
// the attention scores on chip (flash / memory-efficient attention), or runs a chain of elementwise
// operations as one kernel; "unfused" moves every pass through memory, as loom's CPU kernels do.
enum class Fusion : uint8_t { Fused, Unfused };
template <>
struct OptionNames<Fusion> {
  static constexpr std::array<std::string_view, 2> names{"fused", "unfused"};
};

// "a, b, c": the accepted names, for messages and docs.
std::string option_list(const std::string_view* names, size_t count);
template <class E>
std::string option_list() {
  return option_list(OptionNames<E>::names.data(), OptionNames<E>::names.size());
}

// The index of `text` in `names`; InputError `key = "text" is not one of: ...` otherwise (`key`
// may be empty).
size_t option_index(std::string_view key, std::string_view text, const std::string_view* names, size_t count);

template <class E>
E option_from(std::string_view key, std::string_view text) {
  return static_cast<E>(option_index(key, text, OptionNames<E>::names.data(), OptionNames<E>::names.size()));
}

template <class E>
std::string_view name_of(E value) {
  return OptionNames<E>::names[static_cast<size_t>(value)];
}

template <class E>
struct Option {
  E value{};
  constexpr Option() = default;
  constexpr Option(E v) : value(v) {}  // NOLINT: an option is its enum
  Option(const char* name) : value(option_from<E>("", name)) {}          // NOLINT: checked name
  Option(const std::string& name) : value(option_from<E>("", name)) {}   // NOLINT: checked name
  Option(std::string_view name) : value(option_from<E>("", name)) {}     // NOLINT: checked name
  constexpr operator E() const { return value; }                         // NOLINT: compare as the enum
  std::string_view name() const { return name_of(value); }
};

}  // namespace loom
