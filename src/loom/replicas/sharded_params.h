#pragma once
// NOTE [Fully sharded data parallelism]: parallel.zero = 2 and 3. The dense parameters of each
// layer (those that first appear in it, in the rank's model order: a table tied to the head
// belongs to the embedding's layer and is needed by both) form a unit: one flat vector of the
// parameters' local (tp) parts, padded to a multiple of the shard group's size n and placed
// Shard(0) over it (NOTE [Placements]). Rank r of the group owns elements [r S, (r + 1) S) of
// every unit, S = padded / n: their float32 (master) values, their gradient sum and their AdamW
// moments. The parts of parameters inside an owned range update exactly as the whole parameter
// would (AdamW is elementwise), so every layout trains the serial model.
//   - zero = 2: every unit stays whole on every rank (the owned range is a view of it); a
//     micro-batch's gradient of a layer is written into a fresh buffer (Partial), reduce-scattered
//     into the owned range's sum as soon as the layer's weight gradient is done, and freed; after
//     the update each unit is all-gathered.
//   - zero = 3: a unit is whole only while a pass reads it (NOTE [Sharded parameters]):
//     all-gathered just before the layer's forward and again before its input gradient, the next
//     layer's gather started while the current one computes, freed before the layer's weight
//     gradient (which reads no value) or when the action ends. Between uses a parameter's
//     `value` is undefined, so a stray read fails at once instead of reading stale numbers.
//     Under mixed precision the gathered values are rounded to the compute type beside them
//     (NOTE [Mixed precision]). A sliceable parameter (the head's matrix) is cut into row
//     slices, a unit each, that its layer gathers and reduces one by one (NOTE [Sliced reads]).
// The working set: a micro-batch's reduce-scatter of a layer runs behind the next layer's input
// gradient (one in flight: kInFlight) and, in a backward, completes before that layer's weight
// gradient, whose start also starts the gather of the layer after (ParamResidency::prefetch). So
// a rank holds one layer's gathered values with the previous layer's gradient in flight, or one
// layer's gradient with the next layer's values (in a W action, which gathers nothing: with the
// previous layer's gradient in flight); plan/working_set.cpp counts the same. With
// parallel.shard_group = g < dp (hybrid) a group is g dp ranks (times sp), and the owned sums are
// all-reduced across the dp / g groups that own the same range before the update. The trade
// against ZeRO-1's one reduce-scatter of the whole gradient per step: one per micro-batch per
// layer, each of the layer's whole gradient, so m (local micro-batches) times ZeRO-1's gradient
// bytes, for a gradient that is never whole for longer than a layer's backward; ZeRO-3 adds two
// gathers of every layer per micro-batch.
#include <chrono>
#include <deque>
#include <string>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "loom/dist/communicator.h"
#include "loom/models/model.h"
#include "loom/nn/param_residency.h"
#include "loom/optim/adamw.h"
#include "loom/replicas/timeline.h"

namespace loom::replicas {

struct ShardedOptions {
  int zero = 3;  // 2 or 3
  optim::AdamWOptions adamw;
  std::optional<at::ScalarType> wire;  // the type gradients are reduce-scattered in (parallel.grad_dtype)
  at::ScalarType activations = at::kFloat;  // the products' type (a gathered value's compute copy)
  // Makes a dense parameter's value (nn::initialise), called for each as its layer is sharded, so
  // a rank never holds more than one layer whole while it starts; null: the values exist already.
  std::function<void(nn::Param&)> initialise;
};

class ShardedParams final : public nn::ParamResidency, public nn::SliceSource {
 public:
  // `shard`: the group a unit is sharded over; `across`: the groups that own the same ranges
  // (hybrid), null when there are none; `tp`, `pp`: the other groups the gradient norm spans.
  // `model`'s dense parameters are initialised (or options.initialise makes them); from here on
  // they live here.
  ShardedParams(models::Model& model, dist::Communicator& shard, dist::Communicator* across, dist::Communicator& tp,
                dist::Communicator& pp, const ShardedOptions& options);
  ~ShardedParams() override;

  void need(size_t layer, std::optional<size_t> next) override;
  void before_weight_gradient(size_t layer) override;
  void prefetch(size_t layer) override;
  void after_weight_gradient(size_t layer) override;
  void action_done() override;
  at::Tensor value(nn::Param& p, int64_t slice) override;
  at::Tensor grad(nn::Param& p, int64_t slice) override;
  void grad_done(nn::Param& p, int64_t slice) override;

  // Where this step's gathers and reduce-scatters go in the trace (from issue to completion, as
  // this rank saw them); empty: nowhere.
  void set_timeline(Timeline timeline) { timeline_ = std::move(timeline); }
  void zero_grad();
  // As ShardedAdamW::step: waits for the reductions, returns the global gradient norm before
  // clipping, runs `before_update(norm)` before any value changes, updates the owned ranges and
  // (zero = 2) gathers the units.
  double step(double lr, double clip, std::pair<double, double> extra, const std::function<void(double)>& before_update);
  // A parameter's whole value (its tp part); collective over the shard group under zero = 3.
  at::Tensor full_value(const nn::Param& p);
  // After the owned ranges were assigned (a resume): zero = 2 gathers the units again.
  void refresh_units();

  // The parts of parameters inside this rank's owned ranges, as ShardedAdamW::Part, with their value.
  struct Part {
    nn::Param* param;
    int64_t begin;
    at::Tensor value;
  };
  const std::vector<Part>& parts() const { return parts_; }
  const optim::AdamW& adamw() const { return *adamw_; }
  optim::AdamW& adamw() { return *adamw_; }
  // The working set: bytes of gathered values (ZeRO-3) and of gradient buffers not yet reduced
  // that this rank held at once, at most, since zero_grad (the step's start).
  int64_t working_peak_bytes() const { return working_peak_; }

 private:
  struct Slot {
    nn::Param* param;
    int64_t offset, numel;
    std::vector<int64_t> shape;  // the local (tp) part's, or the slice's
    int64_t from = 0;            // where it starts in the parameter's flattened part
    bool slice = false;          // a row slice (NOTE [Sliced reads]): the parameter never views it
  };
  using Clock = std::chrono::steady_clock;
  struct Reduction {
    dist::WorkPtr work;
    at::Tensor out;  // the owned range's share of one micro-batch, in the wire type
    size_t unit;
    Clock::time_point start;
    int64_t held = 0;  // bytes of its input the operation keeps
  };
  struct Unit {
    std::vector<Slot> slots;
    int64_t padded = 0, owned = 0;  // elements of the whole vector and of each rank's range
    int64_t at = 0;                 // where the owned range starts in values_ and grads_
    at::Tensor whole;               // while whole on this rank
    at::Tensor compute;             // a slice's values in the products' type, while whole
    dist::WorkPtr gathering;        // zero = 3: its all-gather in flight
    Clock::time_point gather_start;
    bool gather_traced = false;
    std::string label;              // its first parameter's layer, for the trace
    at::Tensor grad;                // a micro-batch's gradient being written
  };
  void form_units(models::Model& model);
  void form_slices(nn::Param& p);
  void release_layer(size_t layer);  // ZeRO-3: the layer's gathered values (and slices) freed
  void take_values(const at::TensorOptions& master);
  void make_parts();
  at::Tensor owned_value(const Unit& u) const;
  void start_gather(size_t unit);
  void finish_gather(size_t unit);  // the unit whole, its parameters viewing it
  void release(size_t unit);
  void reduce(size_t unit);
  void complete_reductions(size_t keep);  // until at most `keep` are in flight
  void progress();
  void note_working();  // the working set now, into its peak
  void trace(const std::string& what, Clock::time_point start);

  ShardedOptions options_;
  dist::Communicator& shard_;
  dist::Communicator* across_;
  dist::Communicator& tp_;
  dist::Communicator& pp_;
  at::ScalarType wire_;
  std::vector<Unit> units_;
  std::vector<std::vector<size_t>> layer_units_;  // per layer of the model: the units it reads
  // NOTE [Sliced reads]: each sliced parameter's units, by slice; per layer, its sliced parameters.
  std::map<const nn::Param*, std::vector<size_t>> slice_units_;
  std::vector<std::vector<nn::Param*>> layer_sliced_;
  at::Tensor values_;  // zero = 3: every owned range, one after another
  at::Tensor grads_;   // the owned ranges' gradient sums
  std::deque<Reduction> reducing_;
  std::vector<size_t> resident_;  // zero = 3: the units whole now
  std::vector<nn::Param> owned_params_;
  std::vector<Part> parts_;
  std::unique_ptr<optim::AdamW> adamw_;
  int64_t gathered_bytes_ = 0;  // ZeRO-3: the units whole now
  int64_t grad_bytes_ = 0;      // gradient buffers allocated and not yet reduced
  int64_t working_peak_ = 0;
  Timeline timeline_;
};

}  // namespace loom::replicas
