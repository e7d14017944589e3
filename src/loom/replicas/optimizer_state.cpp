// The run's state as checkpoint pieces (NOTE [Checkpoints]): ReplicaOptimizer's view of what this
// rank holds, and its bytes.
#include <map>

#include "loom/replicas/replica_optimizer.h"

namespace loom::replicas {
namespace {

// The box of the full parameter that this rank's part (its tp shard) covers.
ckpt::Box box_of(const nn::Param& p) {
  ckpt::Box box = ckpt::whole(p.full_shape);
  const Shard part = p.part();
  if (part.dim >= 0) {
    box.offset[static_cast<size_t>(part.dim)] = part.start;
    box.size[static_cast<size_t>(part.dim)] = part.length;
  }
  return box;
}

std::string moment_name(const nn::Param& p, int which) { return p.name + (which == 0 ? ":exp_avg" : ":exp_avg_sq"); }

// `data` holds `box` of p; its part inside the model (padding rows are not: NOTE [Vocabulary
// padding]) becomes a piece.
void add(std::vector<ckpt::TensorPiece>& out, std::string name, const nn::Param& p, const ckpt::Box& box,
         const at::Tensor& data) {
  const std::vector<int64_t> shape = p.model_shape();
  const std::optional<ckpt::Box> kept = ckpt::intersect(box, ckpt::whole(shape));
  if (!kept || kept->numel() == 0) return;
  out.push_back({.name = std::move(name), .full_shape = shape, .box = *kept, .data = ckpt::view_of(data, box, *kept)});
}

// A ZeRO-1 part's moments: elements [begin, begin + n) of the parameter's shard, as boxes.
void add_runs(std::vector<ckpt::TensorPiece>& out, const std::string& name, const nn::Param& p, int64_t begin,
              const at::Tensor& moment) {
  int64_t at = 0;
  for (const ckpt::Box& box : ckpt::boxes_of_range(box_of(p), begin, begin + moment.numel())) {
    add(out, name, p, box, moment.narrow(0, at, box.numel()).view(box.size));
    at += box.numel();
  }
}

void add_table(std::vector<ckpt::TensorPiece>& out, const parallel::SparseTable& table) {
  const nn::Param& p = table.param();
  const int64_t width = p.full_shape[1];
  int64_t store = 0;
  for (const auto& [row, count] : table.owned_ranges()) {
    const ckpt::Box box{{row, 0}, {count, width}};
    add(out, p.name, p, box, table.owned().narrow(0, store, count));
    add(out, moment_name(p, 0), p, box, table.exp_avg().narrow(0, store, count));
    add(out, moment_name(p, 1), p, box, table.exp_avg_sq().narrow(0, store, count));
    store += count;
  }
}

// The values and moments of the parameters `adamw` steps, each whole part (its tp or ep shard).
void add_whole(std::vector<ckpt::TensorPiece>& out, const optim::AdamW& adamw) {
  for (size_t i = 0; i < adamw.params().size(); ++i) {
    const nn::Param& p = *adamw.params()[i];
    add(out, p.name, p, box_of(p), p.value);
    add(out, moment_name(p, 0), p, box_of(p), adamw.exp_avg(i));
    add(out, moment_name(p, 1), p, box_of(p), adamw.exp_avg_sq(i));
  }
}

}  // namespace

std::vector<ckpt::TensorPiece> ReplicaOptimizer::state_pieces() const {
  std::vector<ckpt::TensorPiece> out;
  if (experts_) add_whole(out, experts_->adamw());  // NOTE [Experts beside ZeRO]
  if (fsdp_) {  // values and moments: the runs inside this rank's owned ranges
    const optim::AdamW& adamw = fsdp_->adamw();
    for (size_t i = 0; i < fsdp_->parts().size(); ++i) {
      const ShardedParams::Part& part = fsdp_->parts()[i];
      add_runs(out, part.param->name, *part.param, part.begin, part.value);
      add_runs(out, moment_name(*part.param, 0), *part.param, part.begin, adamw.exp_avg(i));
      add_runs(out, moment_name(*part.param, 1), *part.param, part.begin, adamw.exp_avg_sq(i));
    }
    for (const auto& table : sparse_->tables()) add_table(out, *table);
    return out;
  }
  if (sharded_) {
    for (const nn::Param* p : dense_) add(out, p->name, *p, box_of(*p), p->value);
    optim::AdamW& adamw = sharded_->adamw();
    for (size_t i = 0; i < sharded_->parts().size(); ++i) {
      const ShardedAdamW::Part& part = sharded_->parts()[i];
      add_runs(out, moment_name(*part.param, 0), *part.param, part.begin, adamw.exp_avg(i));
      add_runs(out, moment_name(*part.param, 1), *part.param, part.begin, adamw.exp_avg_sq(i));
    }
  } else {
    add_whole(out, *adamw_);
  }
  for (const auto& table : sparse_->tables()) add_table(out, *table);
  return out;
}

// The experts' AdamW counts with the dense one's (every step steps both).
int64_t ReplicaOptimizer::step_count() const {
  if (fsdp_) return fsdp_->adamw().step_count();
  return sharded_ ? sharded_->adamw().step_count() : adamw_->step_count();
}

void ReplicaOptimizer::set_step_count(int64_t steps) {
  if (fsdp_) fsdp_->adamw().set_step_count(steps);
  else if (sharded_) sharded_->adamw().set_step_count(steps);
  else adamw_->set_step_count(steps);
  if (experts_) experts_->adamw().set_step_count(steps);
  for (const auto& table : sparse_->tables()) table->set_step_count(steps);
}

// Every tensor a parameter, gradient or moment lives in, by storage: the model's parameters, each
// AdamW's (ZeRO's owned runs and their gradient buffers) and moments, and the checkpoint pieces
// (the sparse tables' rows and moments besides).
int64_t ReplicaOptimizer::model_state_bytes() const {
  std::map<const void*, int64_t> storages;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.storage().nbytes() > 0) storages[t.storage().data()] = static_cast<int64_t>(t.storage().nbytes());
  };
  auto add_param = [&](const nn::Param& p) { add(p.value), add(p.grad), add(p.compute); };
  for (const nn::Param* p : params_) add_param(*p);
  for (const optim::AdamW* adamw : {adamw_.get(), sharded_ ? &sharded_->adamw() : nullptr,
                                    fsdp_ ? &fsdp_->adamw() : nullptr, experts_ ? &experts_->adamw() : nullptr}) {
    if (adamw == nullptr) continue;
    for (size_t i = 0; i < adamw->params().size(); ++i) {
      add_param(*adamw->params()[i]);
      add(adamw->exp_avg(i)), add(adamw->exp_avg_sq(i));
    }
  }
  for (const ckpt::TensorPiece& piece : state_pieces()) add(piece.data);
  int64_t bytes = 0;
  for (const auto& [storage, size] : storages) bytes += size;
  return bytes;
}

}  // namespace loom::replicas
