#pragma once
// NOTE [Pipeline schedules are data]. A schedule is, for each pipeline rank, the ordered list of
// what it computes: F (forward), B (input gradient), W (weight gradient), BW (both at once) and R
// (recompute the forward from the saved input, ahead of B) for a (micro-batch, chunk). Chunk c of
// rank r is virtual stage v = c * stages + r of the model's chain (interleaved schedules give a
// rank several chunks), or under a V placement (NOTE [V-shaped pipelines]) r for chunk 0 and
// 2 stages - 1 - r for chunk 1. Generators write these lists; the simulator replays any list with unit or
// given costs to prove it complete and deadlock-free and to measure it; the executor runs the
// same lists with real layers, inserting the point-to-point messages that `lower` makes explicit.
//
// Text form: `F3`, `B3`, `W3`, `BW3`, `R3` for micro-batch 3; with several chunks the chunk is a
// prefix, `1F3`; an overlapped pair (NOTE [Overlapped pairs]) is one cell, `0F3&1BW1`. A CSV of a
// V-placed schedule starts with the line `# placement: v`. Lowered messages: `sendF3` (F3's output
// to the next stage), `recvF3` (its input from the previous one), `sendB3`, `recvB3` for gradients.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/options.h"

namespace loom::schedule {

enum class Op : uint8_t { F, B, W, BW, R, SendF, RecvF, SendB, RecvB };

struct Action {
  Op op = Op::F;
  int64_t mb = 0;
  int64_t chunk = 0;
  bool paired = false;  // an F overlapped with the next action, a B or BW (NOTE [Overlapped pairs])
  bool operator==(const Action&) const = default;
  bool is_message() const { return op >= Op::SendF; }
  std::string text(bool with_chunk) const;
};

// NOTE [Overlapped pairs]: an F marked `paired` and the B or BW after it on its rank, of another
// micro-batch, form a pair: a forward beside a backward, so that each one's messages travel while
// the other computes. loom's executor posts both receives before either computes, runs the F,
// posts its send, then waits for the backward's input (which travelled during the F) and runs the
// backward: one after the other, which the simulator replays at Costs::overlap = 1 (each action
// as if unpaired). A device that computes the two together (overlap < 1: the pair takes overlap x
// (F + backward)) needs both inputs first and hands both outputs on at its end, DualPipe's
// semantics, which the simulator replays below 1.

// Parses the text form; throws InputError naming `where` on anything else.
Action parse_action(std::string_view text, const std::string& where);

// NOTE [V-shaped pipelines]: rank r holds two chunks, virtual stages r and 2p - 1 - r, so a
// micro-batch's forward runs down the ranks and back up (0, 1, .., p - 1, p - 1, .., 0), the
// loss is on rank 0 beside the first layers, and the turn (p - 1 to p) is a hand-off within rank
// p - 1 instead of a message. Its schedules split B from W: zb-v throughout, dualpipe-v to warm
// up and drain.
//   zb-v: at unit costs (F = B = W = 1 per chunk, no communication) a rank runs, in order of
//   preference, a B whose gradient has arrived, an F whose input has arrived while fewer than 2p
//   of its (micro-batch, chunk) pairs hold activations (F run, W not), or its oldest pending W;
//   ties go to the earlier micro-batch, then to the later virtual stage. For m >= 2p it runs in
//   6m + p - 1 (the bound: rank p - 1 waits p - 1 for its first input, then works 6m), a bubble
//   of (p - 1) / (6m + p - 1) per rank, and each rank's stash peaks at 2p chunks: 1F1B's peak
//   (p micro-batches of a whole stage on its first rank) on every rank. (Tested for p in {2, 3,
//   4, 8} and m in {2p, 4p, 8p}: tests/unit/test_v_schedules.cpp.)
//   dualpipe-v (DualPipeV, the V-shaped half of DeepSeek's DualPipe, 2025): eight phases per rank
//   r (warm-up forwards of chunk 0; forwards of both chunks; B W F of chunk 1; the steady state of
//   overlapped pairs F0&BW1, F1&BW0; then the drain of whole and split backwards, the Ws last),
//   NOTE [Overlapped pairs]. Each rank stashes at most 2p + 1 chunks. Run as loom's executor runs
//   a pair (overlap 1), at unit costs and no communication it meets zb-v's bound 6m + p - 1, each
//   rank idle p - 1. Computed together (overlap < 1), with F = B >= W per chunk and a pair taking
//   F&B from B + W up to F + B + W, the most idle rank waits (p - 1)(F&B + (B + W) - 3W):
//   DualPipe's published bubble (PP/2 - 1)(F&B + B - 3W), its PP the V's 2p stages and its B the
//   whole backward B + W. (Tested for p in {2, 3, 4, 8} and m in {2p, 4p, 8p}:
//   tests/unit/test_v_schedules.cpp.)
enum class Placement : uint8_t { Loop, V };

struct Schedule {
  std::string kind;  // the generator's name, or "csv"
  int64_t stages = 1, microbatches = 1, chunks = 1;
  Placement placement = Placement::Loop;  // V: chunks = 2
  std::vector<std::vector<Action>> ranks;  // per pipeline rank, in execution order

  int64_t virtual_stages() const { return stages * chunks; }
  int64_t virtual_stage(int64_t rank, int64_t chunk) const {
    return placement == Placement::V && chunk == 1 ? 2 * stages - 1 - rank : chunk * stages + rank;
  }
  // The rank and chunk that hold virtual stage v.
  int64_t rank_of(int64_t v) const {
    return placement == Placement::V && v >= stages ? 2 * stages - 1 - v : v % stages;
  }
  int64_t chunk_of(int64_t v) const { return v / stages; }
};

// The schedule kinds of parallel.schedule: loom::ScheduleKind and its name table
// (core/options.h, NOTE [Option names]).
inline constexpr const auto& kScheduleKinds = OptionNames<ScheduleKind>::names;

// Builds a schedule. gpipe: every forward, then every backward. 1f1b: stage r runs stages-1-r
// forwards, then alternates one forward and one backward. interleaved: 1F1B over `chunks` virtual
// stages per rank (micro-batches in groups of `stages`). zb-h1: backward split into B and W, the W
// deferred into what would be bubbles, at 1F1B's memory. scp (Merak's shifted critical path): 1F1B
// where every stage but the last recomputes, each recomputation issued before the wait for its
// gradient. zb-v: two chunks per rank in a V, B and W apart; dualpipe-v: the V with overlapped
// F&B pairs (NOTE [V-shaped pipelines]); `chunks` is 1 as written for both (the V's two are
// implied). Throws InputError on counts a kind cannot use.
Schedule make_schedule(Option<ScheduleKind> kind, int64_t stages, int64_t microbatches, int64_t chunks = 1);

// One row per position in the lists, one column per rank ("step,rank0,rank1,..."), an overlapped
// pair in one cell; cells past a rank's list are empty. Reading skips empty cells, so a timed grid reads back too.
std::string to_csv(const Schedule& schedule);
Schedule from_csv(const std::string& text, const std::string& where);
// from_csv of a file; InputError if it cannot be read.
Schedule read_csv(const std::string& path);
// parallel.schedule: a generator's name, or "csv:PATH" whose shape must be (stages, microbatches,
// chunks). Throws InputError naming both shapes otherwise.
Schedule schedule_for(const std::string& spec, int64_t stages, int64_t microbatches, int64_t chunks);

// The lists with the point-to-point messages the executor performs: recvF before an F (not on the
// first virtual stage), sendF after it (not on the last), recvB before a B or BW (not on the
// last), sendB after it (not on the first). An overlapped pair's receives both come before its F,
// the backward's first.
std::vector<std::vector<Action>> lower(const Schedule& schedule);

// The executor tags a message by (micro-batch, virtual stage, direction): the tags a schedule
// needs, and the most every MPI guarantees (MPI_TAG_UB >= 32767).
inline int64_t message_tags(const Schedule& s) { return s.microbatches * s.virtual_stages() * 2; }
inline constexpr int64_t kMaxTags = 32768;

}  // namespace loom::schedule
