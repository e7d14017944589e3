#include "loom/replicas/sharded_params.h"

#include <algorithm>
#include <map>

#include "loom/core/error.h"
#include "loom/dist/tensor_placement.h"
#include "loom/nn/precision.h"
#include "loom/optim/clip.h"
#include "loom/replicas/flat_params.h"

namespace loom::replicas {
namespace {

// Reduce-scatters outstanding at once (their gradients' buffers): one, issued after a layer's
// weight gradient, runs behind the next layer's input gradient (NOTE [Fully sharded data
// parallelism]: the working set).
constexpr size_t kInFlight = 1;

void add_unique(std::vector<size_t>& to, size_t value) {
  if (std::find(to.begin(), to.end(), value) == to.end()) to.push_back(value);
}

}  // namespace

ShardedParams::ShardedParams(models::Model& model, dist::Communicator& shard, dist::Communicator* across,
                             dist::Communicator& tp, dist::Communicator& pp, const ShardedOptions& options)
    : options_(options), shard_(shard), across_(across), tp_(tp), pp_(pp) {
  LOOM_CHECK(options.zero == 2 || options.zero == 3, "[zero] stage {} is not a sharded stage", options.zero);
  form_units(model);
  // A stage may hold no dense parameter (only tables on the sparse path): it still joins the
  // step's collectives, with nothing of its own.
  at::TensorOptions master = at::TensorOptions().dtype(at::kFloat);
  if (!units_.empty()) {
    nn::Param& first = *units_.front().slots.front().param;
    if (options.initialise && !first.value.defined()) options.initialise(first);
    master = first.value.options();
  }
  wire_ = options.wire.value_or(master.dtype().toScalarType());
  take_values(master);
  make_parts();
  for (const auto& sliced : layer_sliced_)
    for (nn::Param* p : sliced) p->slices = this;  // once the whole construction succeeded
}

// Each layer's dense parameters not in an earlier unit become its unit (a tied table belongs to
// the first layer that reads it); every layer notes the units its passes read.
void ShardedParams::form_units(models::Model& model) {
  std::map<const nn::Param*, size_t> unit_of;
  for (const auto& layer : model.chain) {
    Unit unit;
    std::vector<size_t> reads;
    std::vector<nn::Param*> sliced;
    for (nn::Param* p : layer->reads()) {
      if (p->sparse != nullptr) continue;  // its rows live on their owners (NOTE [Sparse exchange])
      if (expert_sharded(*p)) continue;   // whole on their ranks (NOTE [Experts beside ZeRO])
      LOOM_CHECK(!slice_units_.contains(p), "[zero] {} is read in slices by one layer only", p->name);
      if (const auto it = unit_of.find(p); it != unit_of.end()) {
        add_unique(reads, it->second);
        continue;
      }
      check_summed_over_data_axes(*p);
      if (p->sliceable && options_.zero == 3) {
        sliced.push_back(p);
        continue;
      }
      unit_of[p] = units_.size();
      unit.slots.push_back({p, unit.padded, p->numel(), p->part_shape()});
      unit.padded += p->numel();
    }
    if (!unit.slots.empty()) {
      const std::string& name = unit.slots.front().param->name;
      unit.label = name.substr(0, name.rfind('.'));
      add_unique(reads, units_.size());
      units_.push_back(std::move(unit));
    }
    for (nn::Param* p : sliced) form_slices(*p);
    layer_sliced_.push_back(std::move(sliced));
    layer_units_.push_back(std::move(reads));
  }
}

// A unit per row slice of `p` (NOTE [Sliced reads]); its layer reads them through this.
void ShardedParams::form_slices(nn::Param& p) {
  std::vector<int64_t> shape = p.part_shape();
  const int64_t row = p.numel() / shape[0];
  const nn::RowSlices cut(shape[0]);
  std::vector<size_t>& units = slice_units_[&p];
  for (int64_t k = 0; k < cut.count(); ++k) {
    shape[0] = cut.length(k);
    Unit unit{.label = fmt::format("{}[{}]", p.name.substr(0, p.name.rfind('.')), k)};
    unit.slots.push_back({&p, 0, cut.length(k) * row, shape, cut.begin(k) * row, true});
    unit.padded = cut.length(k) * row;
    units.push_back(units_.size());
    units_.push_back(std::move(unit));
  }
}

// The units padded to the group and their owned ranges laid out; each unit's values made (or
// taken) one unit at a time and kept whole (ZeRO-2) or only as the owned range (ZeRO-3).
void ShardedParams::take_values(const at::TensorOptions& master) {
  const int n = shard_.size(), r = shard_.rank();
  int64_t total = 0;
  for (Unit& u : units_) {
    u.owned = piece_length(u.padded, n);
    u.padded = u.owned * n;
    u.at = total;
    total += u.owned;
  }
  grads_ = at::zeros({total}, master);
  if (options_.zero == 3) values_ = at::zeros({total}, master);
  for (Unit& u : units_) {
    at::Tensor whole = at::zeros({u.padded}, master);
    for (const Slot& s : u.slots) {
      if (options_.initialise && !s.param->value.defined()) options_.initialise(*s.param);
      s.param->grad.reset();  // the model's own buffers go as each unit takes their place
      whole.narrow(0, s.offset, s.numel).copy_(s.param->value.reshape({-1}).narrow(0, s.from, s.numel));
      if (options_.zero == 2) {
        s.param->value = whole.narrow(0, s.offset, s.numel).view(s.shape);
      } else if (s.from + s.numel == s.param->numel()) {  // its last slot: the whole value is taken
        s.param->value.reset();
        s.param->compute.reset();
      }
    }
    if (options_.zero == 2) u.whole = whole;
    else values_.narrow(0, u.at, u.owned).copy_(whole.narrow(0, r * u.owned, u.owned));
  }
}

// The parts of parameters inside the owned ranges, as parameters of their own for AdamW.
void ShardedParams::make_parts() {
  const int r = shard_.rank();
  for (Unit& u : units_) {
    const int64_t begin = r * u.owned, end = begin + u.owned;
    for (const Slot& s : u.slots) {
      const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, end);
      if (lo >= hi) continue;
      const int64_t first = s.from + lo - s.offset;  // in the parameter's flattened part
      nn::Param part = nn::flat_run(*s.param, fmt::format("{}[{}:{}]", s.param->name, first, first + hi - lo), hi - lo);
      part.value = owned_value(u).narrow(0, lo - begin, hi - lo);
      part.grad = grads_.narrow(0, u.at + lo - begin, hi - lo);
      parts_.push_back({s.param, first, part.value});
      owned_params_.push_back(std::move(part));
    }
  }
  std::vector<nn::Param*> pointers;
  for (nn::Param& p : owned_params_) pointers.push_back(&p);
  adamw_ = std::make_unique<optim::AdamW>(std::move(pointers), options_.adamw);
}

ShardedParams::~ShardedParams() {  // unfinished work is abandoned only while an error unwinds
  for (const auto& sliced : layer_sliced_)
    for (nn::Param* p : sliced) p->slices = nullptr;
}

at::Tensor ShardedParams::owned_value(const Unit& u) const {
  return options_.zero == 2 ? u.whole.narrow(0, shard_.rank() * u.owned, u.owned) : values_.narrow(0, u.at, u.owned);
}

void ShardedParams::start_gather(size_t unit) {
  Unit& u = units_[unit];
  if (u.whole.defined()) return;
  u.whole = at::empty({u.padded}, values_.options());
  gathered_bytes_ += u.padded * static_cast<int64_t>(u.whole.element_size());
  u.gather_start = Clock::now();
  u.gather_traced = false;
  u.gathering = shard_.all_gather_async(owned_value(u), u.whole);
  resident_.push_back(unit);
  note_working();
}

void ShardedParams::finish_gather(size_t unit) {
  Unit& u = units_[unit];
  if (!u.gathering) return;
  u.gathering->wait();
  u.gathering.reset();
  if (!u.gather_traced) trace("gather " + u.label, u.gather_start);
  for (const Slot& s : u.slots) {
    if (s.slice) {
      u.compute = nn::to_type(u.whole.narrow(0, s.offset, s.numel).view(s.shape), options_.activations);
      continue;
    }
    s.param->value = u.whole.narrow(0, s.offset, s.numel).view(s.shape);
    nn::refresh_compute(*s.param, options_.activations);
  }
}

void ShardedParams::release(size_t unit) {
  Unit& u = units_[unit];
  if (u.gathering) u.gathering->wait();  // a prefetch no pass used: it still completes on every rank
  u.gathering.reset();
  for (const Slot& s : u.slots) {
    if (s.slice) continue;
    s.param->value.reset();
    s.param->compute.reset();
  }
  gathered_bytes_ -= u.padded * static_cast<int64_t>(u.whole.element_size());
  u.whole.reset();
  u.compute.reset();
  resident_.erase(std::remove(resident_.begin(), resident_.end(), unit), resident_.end());
}

void ShardedParams::release_layer(size_t layer) {
  std::vector<size_t> units = layer_units_[layer];
  for (const nn::Param* p : layer_sliced_[layer]) units.insert(units.end(), slice_units_.at(p).begin(), slice_units_.at(p).end());
  for (size_t u : units)
    if (units_[u].whole.defined()) release(u);
}

void ShardedParams::need(size_t layer, std::optional<size_t> next) {
  progress();
  if (options_.zero == 2) return;
  std::vector<size_t> wanted = layer_units_[layer];
  if (next)
    for (size_t u : layer_units_[*next]) add_unique(wanted, u);
  // What neither this pass nor the next needs goes first, so the working set never holds three
  // layers at once.
  const std::vector<size_t> resident = resident_;
  for (size_t u : resident)
    if (std::find(wanted.begin(), wanted.end(), u) == wanted.end()) release(u);
  for (size_t u : layer_units_[layer]) start_gather(u);
  for (size_t u : layer_units_[layer]) finish_gather(u);
  if (next)
    for (size_t u : layer_units_[*next]) start_gather(u);  // overlaps this layer's pass
}

void ShardedParams::action_done() {
  progress();
  if (options_.zero == 2) return;
  while (!resident_.empty()) release(resident_.back());
}

// The weight gradient reads no value (NOTE [Sharded parameters]): under ZeRO-3 the layer's gathered
// values go before its gradient buffers come, so the two are never held together.
void ShardedParams::before_weight_gradient(size_t layer) {
  if (options_.zero == 3) release_layer(layer);
  for (size_t unit : layer_units_[layer]) {
    Unit& u = units_[unit];
    if (u.grad.defined()) continue;
    u.grad = at::zeros({u.padded}, grads_.options());
    grad_bytes_ += u.padded * static_cast<int64_t>(u.grad.element_size());
    note_working();
    for (const Slot& s : u.slots) s.param->grad = u.grad.narrow(0, s.offset, s.numel).view(s.shape);
  }
}

// The reduce-scatter in flight (the layer before in backward's order, issued after its weight
// gradient, which had this layer's input gradient to run behind) completes first: the gradient
// being written and the values gathered ahead are then all this rank holds beyond its state.
void ShardedParams::prefetch(size_t layer) {
  if (options_.zero != 3) return;  // nothing to gather: the reduction runs on behind the weight gradient
  complete_reductions(0);
  for (size_t u : layer_units_[layer]) start_gather(u);
}

void ShardedParams::after_weight_gradient(size_t layer) {
  for (size_t unit : layer_units_[layer]) reduce(unit);
}

// One micro-batch's gradient of a unit (Partial) into the owned range's sum (Shard(0)).
void ShardedParams::reduce(size_t unit) {
  Unit& u = units_[unit];
  if (!u.grad.defined()) return;
  complete_reductions(kInFlight - 1);
  const at::Tensor input = nn::to_type(u.grad, wire_);
  Reduction r{.out = at::empty({u.owned}, input.options()), .unit = unit, .start = Clock::now(),
              .held = input.numel() * static_cast<int64_t>(input.element_size())};
  const bool copied = !input.is_same(u.grad);  // a narrower wire's copy, beside the buffer for a moment
  if (copied) grad_bytes_ += r.held;
  note_working();
  r.work = shard_.reduce_scatter_async(input, r.out, dist::ReduceOp::Sum);  // the Work keeps `input`
  for (const Slot& s : u.slots)
    if (!s.slice) s.param->grad.reset();
  if (copied) grad_bytes_ -= u.padded * static_cast<int64_t>(u.grad.element_size());
  u.grad.reset();
  reducing_.push_back(std::move(r));
}

void ShardedParams::complete_reductions(size_t keep) {
  while (reducing_.size() > keep) {
    Reduction& r = reducing_.front();
    r.work->wait();
    const Unit& u = units_[r.unit];
    trace("reduce_scatter " + u.label, r.start);
    grads_.narrow(0, u.at, u.owned).add_(r.out);
    grad_bytes_ -= r.held;
    reducing_.pop_front();
  }
}

void ShardedParams::progress() {
  for (Reduction& r : reducing_) r.work->test();  // NOTE [Progress]
  while (!reducing_.empty() && reducing_.front().work->test()) complete_reductions(reducing_.size() - 1);
  for (size_t unit : resident_) {
    Unit& u = units_[unit];
    if (u.gathering && !u.gather_traced && u.gathering->test()) {  // seen complete: its span ends here
      trace("gather " + u.label, u.gather_start);
      u.gather_traced = true;
    }
  }
}

void ShardedParams::trace(const std::string& what, Clock::time_point start) {
  if (timeline_) timeline_(what.c_str(), kShardedTraffic, start, Clock::now());
}

void ShardedParams::note_working() {
  working_peak_ = std::max(working_peak_, gathered_bytes_ + grad_bytes_);  // ZeRO-2 gathers nothing: its units are state
}

void ShardedParams::zero_grad() {
  grads_.zero_();
  working_peak_ = 0;
}

double ShardedParams::step(double lr, double clip, std::pair<double, double> extra,
                           const std::function<void(double)>& before_update) {
  complete_reductions(0);
  if (across_ != nullptr && across_->size() > 1 && grads_.numel() > 0)  // hybrid (the same units across)
    across_->all_reduce(grads_, dist::ReduceOp::Sum);
  const double norm = optim::sharded_grad_norm(owned_params_, shard_, extra, tp_, &pp_);  // the owned ranges'
  if (before_update) before_update(norm);
  const double factor = optim::clip_factor(norm, clip);
  if (factor != 1.0) grads_.mul_(factor);
  adamw_->step(lr);
  refresh_units();
  return norm;
}

void ShardedParams::refresh_units() {
  if (options_.zero != 2) return;
  std::vector<dist::WorkPtr> works;
  for (Unit& u : units_) works.push_back(shard_.all_gather_async(owned_value(u).clone(), u.whole));
  for (auto& w : works) w->wait();
}

// Collective: every unit holding a slot of `p` is gathered, in unit order (a sliced parameter's
// slices in row order).
at::Tensor ShardedParams::full_value(const nn::Param& p) {
  if (options_.zero == 2) return p.value;
  std::vector<at::Tensor> runs;
  for (const Unit& u : units_) {
    for (const Slot& s : u.slots) {
      if (s.param != &p) continue;
      at::Tensor whole = at::empty({u.padded}, values_.options());
      shard_.all_gather(owned_value(u), whole);
      runs.push_back(whole.narrow(0, s.offset, s.numel));
    }
  }
  if (runs.empty()) throw Error(fmt::format("[zero] {} is not a sharded parameter of this rank", p.name));
  return at::cat(runs).view(p.part_shape());
}

// NOTE [Sliced reads]: slice k whole, k + 1 gathering behind it, the parameter's other slices freed.
at::Tensor ShardedParams::value(nn::Param& p, int64_t slice) {
  progress();
  const std::vector<size_t>& units = slice_units_.at(&p);
  const auto k = static_cast<size_t>(slice);
  for (size_t i = 0; i < units.size(); ++i)
    if (i != k && i != k + 1 && units_[units[i]].whole.defined()) release(units[i]);
  start_gather(units[k]);
  finish_gather(units[k]);
  if (k + 1 < units.size()) start_gather(units[k + 1]);
  const Unit& u = units_[units[k]];
  return u.compute.defined() ? u.compute : u.whole.narrow(0, 0, u.slots.front().numel).view(u.slots.front().shape);
}

at::Tensor ShardedParams::grad(nn::Param& p, int64_t slice) {
  Unit& u = units_[slice_units_.at(&p).at(static_cast<size_t>(slice))];
  LOOM_CHECK(!u.grad.defined(), "[zero] {} slice {}: its gradient was asked for twice", p.name, slice);
  u.grad = at::zeros({u.padded}, grads_.options());
  grad_bytes_ += u.padded * static_cast<int64_t>(u.grad.element_size());
  note_working();
  return u.grad.narrow(0, 0, u.slots.front().numel).view(u.slots.front().shape);
}

void ShardedParams::grad_done(nn::Param& p, int64_t slice) { reduce(slice_units_.at(&p).at(static_cast<size_t>(slice))); }

}  // namespace loom::replicas
