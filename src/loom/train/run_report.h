#pragma once
// What a run tells its user, apart from the training itself: the header lines, the progress line,
// the metrics file (JSON Lines, one record per step), the trace file and the summary line. World
// rank 0 writes them; every other rank holds an inert report. The files are written in place as
// the run goes (NOTE [Live output files]) and closed however the run ends: a run that fails, or
// whose peer dies, leaves every finished step readable.
#include <iosfwd>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "loom/models/registry.h"
#include "loom/replicas/sparse_tables.h"
#include "loom/trace/chrome_trace.h"
#include "loom/trace/metrics_writer.h"
#include "loom/train/progress.h"

namespace loom::train {

// NOTE [Expert measures]: one mixture-of-experts block's routing over a step, every rank's
// micro-batches together.
struct ExpertLoad {
  int64_t block = 0;            // the decoder block's index
  std::vector<int64_t> tokens;  // assignments each expert took (kept)
  std::vector<int64_t> chosen;  // assignments chosen for each expert, before drops
  int64_t dropped = 0;          // assignments past an expert's capacity
  double aux_loss = 0;          // the balance loss E sum f P (without its coefficient), mean over micro-batches
  // The busiest expert's tokens over the mean (1: even; E: one expert took all); 0 without tokens.
  double imbalance() const;
};

struct StepRecord {
  int64_t step = 0;  // the step completed, counted from 1 (as the progress line and metrics say)
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_ms = 0, mfu = 0;  // tokens_per_s: the model kind's items per second
  int64_t peak_bytes = 0;                       // largest over ranks
  int64_t host_peak_bytes = 0;                  // the swap tier's (memory.swap, NOTE [Swap tier]), largest over ranks
  // What a rank holds between steps, right after the update (parameters, the gradients it keeps,
  // moments, table rows: the state ZeRO shards), largest over ranks.
  int64_t state_bytes = 0;
  // Of that, the bytes of the tensors that hold parameters, gradients and AdamW moments (each
  // storage once, counted from the optimizer's live tensors: ReplicaOptimizer::model_state_bytes),
  // largest over ranks; state_bytes less this is what the run holds beside the model.
  int64_t model_state_bytes = 0;
  // ZeRO-2/3: the most bytes of gathered values and unreduced gradients a rank held at once in the
  // step (the working set beside the state), largest over ranks; 0 for the other stages.
  int64_t working_bytes = 0;
  double bubble_fraction = 0;                   // pp > 1: 1 - compute time / the pipeline's longest time, mean over ranks
  double predicted_bubble_fraction = 0;         // pp > 1: the simulator's, for the measured action times
  std::vector<int64_t> peak_bytes_by_stage;     // pp > 1: each pipeline stage's peak (this dp/tp slice)
  std::map<std::string, int64_t> comm_bytes;    // this rank's bytes by mesh axis
  int64_t sparse_partitions = 0;                // the sparse path's partition count (0: off)
  std::vector<replicas::TableChoice> tables;    // rank 0's embedding tables: path and why (NOTE [Table paths])
  double checkpoint_s = 0;                      // seconds a checkpoint save held this step's end (0: none)
  std::optional<double> val_loss;               // a validation pass after this step (NOTE [Validation])
  double eval_s = 0;                            // its seconds (not part of step_ms)
  std::vector<ExpertLoad> experts;              // each block with experts (model.moe_experts > 0)
};

struct ReportOptions {
  std::string metrics_path;          // "" = none
  std::string trace_path;            // "" = none
  std::ostream* console = nullptr;   // nullptr = quiet
  int64_t steps = 0;                 // the run's length (train.steps)
  int64_t last_step = 0;             // the step this process ends at (--stop-after), for the ETA
  int64_t log_every = 1;             // a progress line every this many steps (and the last)
  int64_t samples_per_step = 0;      // train.global_batch
  int64_t resumed_step = 0;          // a resumed run's first step - 1: its metrics file continues
  models::Throughput unit;
  int64_t ranks = 1;                 // the world's: NOTE [MFU]'s ranks
};

class RunReport {
 public:
  // `rank0`: this rank writes; `world_size`: the trace's tracks.
  RunReport(const ReportOptions& options, bool rank0, int world_size);
  ~RunReport();

  void header(const std::string& lines);
  // Fills the record's throughput and MFU (from its step_ms; NOTE [MFU]: `flops_per_step` is the
  // whole job's model FLOPs, `peak_flops` one rank's), writes it, and prints it when due.
  void step(StepRecord& record, double flops_per_step, double peak_flops);
  trace::TraceFile* trace_file() { return trace_.get(); }
  void close();
  // close() for another thread while this one may be writing (a dead peer's watch, NOTE [Interrupts]).
  void finalise_now();
  // `checkpoint`: the run's last checkpoint ("" none).
  void summary(const std::vector<StepRecord>& records, double seconds, const std::string& checkpoint);

 private:
  ReportOptions options_;
  trace::MetricsWriter metrics_;
  std::unique_ptr<trace::TraceFile> trace_;
  ProgressPrinter progress_;
  bool closed_ = false;
};

}  // namespace loom::train
