#include "loom/dist/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace loom::dist {
namespace {

// The only process-wide state in dist, and it has to be: a signal handler receives nothing but the
// signal number, so it cannot reach the Runtime or any object. Reset and installed by the
// InterruptHandler (the Runtime's), which is the only reader. Lock-free atomics, not volatile
// sig_atomic_t: that type is safe between a handler and the thread it interrupted only, and the
// peer watch thread reads g_signal too (ThreadSanitizer reported the race, `make test-tsan`); a
// lock-free atomic is both safe in a handler and ordered across threads.
std::atomic<int> g_signal{0};
std::atomic<int> g_armed{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

// Ends the process as the signal's default action would, so a parent (a shell loop, a batch
// system) sees what killed it.
void die_of(int signal) {
  std::signal(signal, SIG_DFL);
  std::raise(signal);
  ::_exit(128 + signal);
}

extern "C" void on_interrupt(int signal) {
  if (g_armed == 0) die_of(signal);
  if (g_signal != 0) {  // the second one: no more waiting for the step to end
    static const char line[] = "loom: second signal: exiting now\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line, sizeof line - 1);
    die_of(signal);
  }
  g_signal = signal;
}

// A process that is gone, or a zombie waiting for its launcher to reap it.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string pid_text, name, state;
  return stat >> pid_text >> name >> state && state == "Z";
}

}  // namespace

struct InterruptHandler::Watch {
  std::atomic<bool> stop{false};
  std::thread thread;
};

InterruptHandler::InterruptHandler() {
  g_signal = 0;
  g_armed = 0;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
}

InterruptHandler::~InterruptHandler() {
  if (watch_) {
    watch_->stop = true;
    watch_->thread.join();
  }
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int InterruptHandler::signal() const { return g_signal; }

int InterruptHandler::agreed_signal(Communicator& world) {
  int first = signal();
  if (world.size() > 1) {
    at::Tensor vote = at::full({1}, static_cast<int64_t>(first), at::kLong);
    world.all_reduce(vote, ReduceOp::Max);
    first = static_cast<int>(vote.item<int64_t>());
  }
  if (first != 0) acknowledge();
  return first;
}

void InterruptHandler::acknowledge() { acknowledged_ = true; }

void InterruptHandler::arm() { g_armed = 1; }

void InterruptHandler::watch_local_peers(int my_rank, std::vector<LocalPeer> peers) {
  if (peers.empty() || watch_) return;
  watch_ = std::make_unique<Watch>();
  watch_->thread = std::thread([this, my_rank, peers = std::move(peers)] {
    using namespace std::chrono_literals;
    bool acted = false;  // this rank has run its peer-loss action (and the lowest one printed)
    while (!watch_->stop) {
      std::this_thread::sleep_for(50ms);
      if (g_signal == 0 || acknowledged_) continue;
      int dead = -1, lowest_alive = my_rank;
      for (const LocalPeer& p : peers) {
        if (process_gone(p.pid)) {
          if (dead < 0) dead = p.rank;
        } else if (p.rank < lowest_alive) {
          lowest_alive = p.rank;
        }
      }
      if (dead < 0) continue;
      if (!acted) {
        acted = true;
        if (lowest_alive == my_rank) {
          const std::string line = fmt::format("loom: error: rank {} ended unexpectedly (its process is gone); "
                                               "ending the job\n", dead);
          [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
        }
        run_peer_loss_action();
      }
      // A rank ends only once every lower survivor has: the lowest, which names the loss, ends
      // first. A launcher may stop the job at the next exit it sees (Open MPI's mpirun cuts its
      // wait between SIGTERM and SIGKILL short when a child ends), which must not come before
      // that line.
      if (lowest_alive == my_rank) ::_exit(1);
    }
  });
}

void InterruptHandler::at_peer_loss(std::function<void()> action) {
  const std::lock_guard lock(peer_loss_mutex_);
  peer_loss_ = std::move(action);
}

void InterruptHandler::run_peer_loss_action() noexcept {
  const std::lock_guard lock(peer_loss_mutex_);
  if (!peer_loss_) return;
  try {
    peer_loss_();
  } catch (...) {  // the process ends next whatever happens: the outputs stay as they are
  }
}

PeerLossAction::PeerLossAction(InterruptHandler* handler, std::function<void()> action) : handler_(handler) {
  if (handler_ != nullptr) handler_->at_peer_loss(std::move(action));
}

PeerLossAction::~PeerLossAction() {
  if (handler_ != nullptr) handler_->at_peer_loss({});
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return fmt::format("signal {}", signal);
  }
}

std::string signal_text(int signal) {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("SLURM_JOB_ID") != nullptr;
  if (signal != SIGTERM || !launched) return signal_name(signal);
  return "SIGTERM (as the launcher passes on a Ctrl-C, or a batch system stops the job)";
}

}  // namespace loom::dist
