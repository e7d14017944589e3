#pragma once
// NOTE [Heartbeat]: a host that vanishes, or a link that goes down, ends the job within a bounded
// time and says which. The local peer watch (NOTE [Interrupts]) sees only the processes of this
// machine, and the communication time-out (NOTE [Watchdog]) is long by design: a slow collective
// is not a failure. So the lowest rank of each host (its leader) sends every other host's leader a
// small message each interval, from a thread of its own on a communicator of their own, and
// watches for theirs. A leader that hears nothing from a host for `limit_s` declares it lost:
//   - the lowest leader among the hosts it still hears prints one line naming itself, the lost
//     host and its ranks: `loom: error: [rank 0 on h1] no heartbeat from host h2 (ranks 2, 3) for
//     10 s; ...`;
//   - it tells every leader it still hears that it is ending, and they end their hosts too,
//     without a line of their own: once it ends, a leader that heard both sides of a partial
//     partition (h1 and h3 cut apart, h2 reaching both) would find them both silent. Where it
//     printed no line (it hears a lower leader), it asks the lowest leader it hears to report
//     the loss, naming both hosts. A leader told waits 3 intervals for such a request, which may
//     come later than another's message, unless told that a line was printed; it reports the
//     first request, unless it finds a loss itself meanwhile, and then tells those it hears,
//     passing on a lower leader's "printed" to the leaders above that one (so one leader's
//     request, and another's "printed", reach the rest in time: told "printed", a leader prints no
//     line; one below the printer may be the host cut off from it, and keeps its own). A leader that
//     has said goodbye (its run ended) is not listened to any more: a loss it finds then, while
//     it waits for the others to finish, is found again by them, with a line of their own;
//   - it writes the verdict into a word its host's ranks share (an MPI shared-memory window);
//   - each rank of the host, seeing the verdict, runs its peer-loss action (closing its live
//     outputs, NOTE [Live output files]), and once all have (or after 5 s), they leave the launcher
//     20 s to end the job, and then end themselves, exit code 1.
// Why wait for the launcher: once a rank ends, Open MPI's mpirun sends the end of the job to every
// host's daemon and waits for each to confirm, the lost one too, until TCP gives up on it (15
// minutes). A launcher that finds the lost daemon first (its links' keepalive probes, tuned in
// docs/multi-host.md) ends the job at once. Both sides of a cut link end: the isolated host's
// leader hears nobody, so it ends its own ranks too (its line may not reach the launcher, whose
// output travels over the cut link). A checkpoint being written when the job ends stays
// unfinished, and `latest` names the one before (NOTE [Atomic checkpoints]).
//
// A leader leaving (the Runtime's end) says goodbye and waits for every other leader's, still
// watching them, and they go on beating it until they leave too: a host that finishes first is
// not taken for lost, nor one that finishes long after it. One message per pair of hosts and
// interval: H hosts send H (H - 1) small messages a second. Needs MPI_THREAD_MULTIPLE (rank 0
// warns without it); there is none on one host or with a limit of 0 (LOOM_HEARTBEAT_S, rank 0's).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "loom/dist/interrupt.h"

namespace loom::dist::detail {

class Heartbeat {
 public:
  // Collective over MPI_COMM_WORLD. `node`: this machine's ranks (used, not kept); `host_of[r]`:
  // the lowest world rank on world rank r's machine. `interrupts` outlives the heartbeat.
  Heartbeat(MPI_Comm node, std::vector<int> host_of, double limit_s, InterruptHandler& interrupts);
  ~Heartbeat();  // collective: the goodbyes (see the NOTE)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Whether the job needs one: several hosts, a positive limit, MPI_THREAD_MULTIPLE.
  static bool wanted(const std::vector<int>& host_of, double limit_s, bool thread_multiple);

 private:
  struct Peer;
  void loop();
  void beat(double now);
  void listen(double now);
  void say_goodbye();
  bool everyone_left() const;
  void declare_lost(double now);
  bool follow_endings(double now);  // true: this host ends
  // `printer`: the leader whose line this one passes on (kReported); leaders below it hear kNothing.
  void tell_ending(double now, int64_t lost, int64_t note, int64_t printer = -1);
  [[noreturn]] void end_host();

  std::vector<int> host_of_;
  double limit_s_, interval_s_;
  InterruptHandler& interrupts_;
  int rank_ = 0;
  int local_ranks_ = 1;
  bool leader_ = false;
  MPI_Comm leaders_ = MPI_COMM_NULL;  // the hosts' leaders (leaders only)
  int me_ = 0;                         // this leader's rank in leaders_
  std::vector<std::string> names_;    // each leader's host name, by leaders_ rank
  std::vector<Peer> peers_;           // the other leaders
  std::vector<MPI_Request> sends_;    // beats and goodbyes under way
  double next_beat_ = 0;
  bool said_goodbye_ = false;
  const Peer* relay_from_ = nullptr;  // the leader that asked this one to report its loss
  double told_at_ = -1;               // when another leader first told this one it was ending
  std::vector<int64_t> ending_notes_; // the ending messages' payloads
  MPI_Win window_ = MPI_WIN_NULL;      // the host's shared words:
  int64_t* verdict_ = nullptr;         //   0, or (the host ends) a lost host's leader rank + 1, or
                                       //   the leader's own when another told it of a loss
  int64_t* acted_ = nullptr;           //   the host's ranks that ran their peer-loss action
  std::atomic<bool> leaving_{false};
  std::thread thread_;  // last: started once every member above is set
};

}  // namespace loom::dist::detail
