#pragma once
// NOTE [Interrupts]: SIGINT and SIGTERM (Ctrl-C, `kill`, a batch system's preemption) ask a run
// to stop, not to vanish. The Runtime installs an InterruptHandler for its lifetime. Until a
// command arms it, a signal ends the process at once, as by default (nothing waits for it: `loom
// data prepare` leaves only its temporary). Once armed (a training run), the first signal is only
// recorded; the trainer polls it at the end of every step, all ranks agree on it
// in that step's collective (so every rank stops after the same step), the outputs are closed and
// the CLI exits 128 + signal. A second signal ends the process at once.
//
// A rank killed outright (SIGKILL, the out-of-memory killer) cannot say anything; under mpirun
// the launcher then sends SIGTERM to the others. With `watch_local_peers`, a rank that receives a
// signal looks for peers on its machine whose process has gone, and if it finds one the lowest
// surviving local rank prints `loom: error: rank R ended unexpectedly` before the job ends, and
// every surviving rank first runs its `at_peer_loss` action (closing its live outputs, NOTE [Live
// output files]) on the watch thread. The survivors end in rank order, the one that prints first:
// Open MPI's mpirun sends SIGKILL to all as soon as one more rank ends, which would otherwise race
// that line (seen under AddressSanitizer, where the printing rank is slower).
#include <sys/types.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::dist {

struct LocalPeer {
  int rank;   // in the world
  pid_t pid;
};

class InterruptHandler {
 public:
  InterruptHandler();   // installs the handlers
  ~InterruptHandler();  // restores the previous ones and stops the peer watch
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

  int signal() const;  // the first signal received; 0 = none
  // Collective over `world`: the first signal any rank received (0: none), acknowledged when
  // there is one, so that every rank stops after the same step.
  int agreed_signal(Communicator& world);
  void arm();          // from now on the first signal is recorded, not fatal
  // After a signal, watches the processes of the other ranks on this machine (see the NOTE).
  void watch_local_peers(int my_rank, std::vector<LocalPeer> peers);
  // Every rank has agreed to stop: peers that exit from now on are ending as asked.
  void acknowledge();
  // What this process does on the watch thread, just before it ends, when it finds a peer gone
  // (empty: nothing). The action must be safe to run beside the thread it was set from; setting
  // another (or an empty one) waits for a running one to finish, so an object it refers to may be
  // destroyed once the action is cleared.
  void at_peer_loss(std::function<void()> action);
  // Runs the action now, on the calling thread (the peer watch, NOTE [Heartbeat]); what it throws
  // is dropped, as the process ends next.
  void run_peer_loss_action() noexcept;

 private:
  struct sigaction old_int_ {}, old_term_ {};
  struct Watch;
  std::unique_ptr<Watch> watch_;
  std::atomic<bool> acknowledged_{false};
  std::mutex peer_loss_mutex_;
  std::function<void()> peer_loss_;
};

// Sets an action of `handler` (none: does nothing) for its lifetime, then clears it.
class PeerLossAction {
 public:
  PeerLossAction(InterruptHandler* handler, std::function<void()> action);
  ~PeerLossAction();
  PeerLossAction(const PeerLossAction&) = delete;
  PeerLossAction& operator=(const PeerLossAction&) = delete;

 private:
  InterruptHandler* handler_;
};

// "SIGINT", "SIGTERM", else "signal N".
std::string signal_name(int signal);
// The name, and for a SIGTERM under a launcher (mpirun, Slurm) where it may come from: mpirun
// passes a Ctrl-C on to the ranks as SIGTERM, and batch systems stop a job with it.
std::string signal_text(int signal);

}  // namespace loom::dist
