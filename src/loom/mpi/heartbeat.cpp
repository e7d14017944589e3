#include "loom/mpi/heartbeat.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loom/core/host_name.h"
#include "loom/mpi/thread_sanitizer.h"

namespace loom::dist::detail {
namespace {

constexpr int kBeat = 1, kGoodbye = 2, kEnding = 3;  // the message tags
constexpr int64_t kPayload = 1;                      // of beats and goodbyes: it means nothing
// An ending message's payload: (the lost host's leader + 1) x 4 + one of these.
enum Note : int64_t { kNothing = 0, kYouReport = 1, kReported = 2 };
constexpr double kActionWaitS = 5;     // how long a host's ranks wait for each other's peer-loss actions
constexpr double kLauncherWaitS = 20;  // then how long they leave the launcher to end the job
constexpr double kRelayWaitIntervals = 3;  // how long a leader told of a loss waits for more (the NOTE)

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// The world ranks whose lowest rank on their machine is `host`.
std::string ranks_of(const std::vector<int>& host_of, int host) {
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(host_of.size()); ++r)
    if (host_of[r] == host) ranks.push_back(r);
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace

struct Heartbeat::Peer {
  int leader = 0;      // its rank in leaders_
  int world = 0;       // its world rank
  double heard = 0;    // when its last message came
  bool left = false;   // it said goodbye
  bool ending = false; // it is ending its host; `in` holds its note
  int64_t in = 0;
  MPI_Request recv = MPI_REQUEST_NULL;
};

bool Heartbeat::wanted(const std::vector<int>& host_of, double limit_s, bool thread_multiple) {
  const std::set<int> hosts(host_of.begin(), host_of.end());
  return hosts.size() > 1 && limit_s > 0 && thread_multiple;
}

Heartbeat::Heartbeat(MPI_Comm node, std::vector<int> host_of, double limit_s, InterruptHandler& interrupts)
    : host_of_(std::move(host_of)),
      limit_s_(limit_s),
      interval_s_(std::clamp(limit_s / 10, 0.05, 1.0)),
      interrupts_(interrupts) {
  const MpiOwnAccesses own;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(node, &local_ranks_);
  leader_ = host_of_[rank_] == rank_;
  // The node's rank 0 is its lowest world rank (split with the world rank as key): the leader.
  void* base = nullptr;
  MPI_Win_allocate_shared(leader_ ? 2 * sizeof(int64_t) : 0, sizeof(int64_t), MPI_INFO_NULL, node, &base, &window_);
  MPI_Aint bytes = 0;
  int unit = 0;
  MPI_Win_shared_query(window_, 0, &bytes, &unit, &base);
  verdict_ = static_cast<int64_t*>(base);
  acted_ = verdict_ + 1;
  if (leader_) *verdict_ = *acted_ = 0;
  MPI_Barrier(node);  // the words are zero before anyone reads them

  MPI_Comm_split(MPI_COMM_WORLD, leader_ ? 0 : MPI_UNDEFINED, rank_, &leaders_);
  if (leader_) {
    int size = 0;
    MPI_Comm_size(leaders_, &size);
    MPI_Comm_rank(leaders_, &me_);
    std::array<char, 64> mine{};
    const std::string name = host_name("?");
    std::copy_n(name.begin(), std::min(name.size(), mine.size() - 1), mine.begin());
    std::vector<char> all(mine.size() * size);
    MPI_Allgather(mine.data(), mine.size(), MPI_CHAR, all.data(), mine.size(), MPI_CHAR, leaders_);
    const std::set<int> hosts(host_of_.begin(), host_of_.end());  // leaders_ ranks in world order
    const std::vector<int> worlds(hosts.begin(), hosts.end());
    const double now = seconds_now();
    peers_.reserve(size);
    for (int i = 0; i < size; ++i) {
      names_.emplace_back(&all[i * mine.size()]);
      if (i != me_) peers_.push_back(Peer{i, worlds[i], now});
    }
    for (Peer& p : peers_) MPI_Irecv(&p.in, 1, MPI_INT64_T, p.leader, MPI_ANY_TAG, leaders_, &p.recv);
  }
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  leaving_ = true;
  thread_.join();
  const MpiOwnAccesses own;
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
  MPI_Win_free(&window_);
}

void Heartbeat::loop() {
  const double poll = std::min(0.05, interval_s_ / 4);
  while (true) {
    sleep_s(poll);
    if (std::atomic_ref<int64_t>(*verdict_).load() != 0) end_host();
    if (!leader_) {
      if (leaving_) return;
      continue;
    }
    const double now = seconds_now();
    listen(now);
    if (follow_endings(now)) continue;
    if (leaving_ && !said_goodbye_) say_goodbye();
    if (!said_goodbye_ && now >= next_beat_) beat(now);
    declare_lost(now);
    if (said_goodbye_ && everyone_left()) break;
  }
  const MpiOwnAccesses own;
  MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
}

void Heartbeat::beat(double now) {
  const MpiOwnAccesses own;
  std::erase_if(sends_, [](MPI_Request& r) {
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  // Those that left too: they watch this host until its own goodbye, their receives still posted.
  for (const Peer& p : peers_) {
    sends_.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&kPayload, 1, MPI_INT64_T, p.leader, kBeat, leaders_, &sends_.back());
  }
  next_beat_ = now + interval_s_;
}

void Heartbeat::listen(double now) {
  const MpiOwnAccesses own;
  for (Peer& p : peers_) {
    int done = 0;
    MPI_Status status;
    // Every message waiting from this peer; its goodbye comes after its last beat (MPI keeps the
    // order of one sender's messages that match the same receive).
    while (p.recv != MPI_REQUEST_NULL && (MPI_Test(&p.recv, &done, &status), done != 0)) {
      p.heard = now;
      if (status.MPI_TAG == kGoodbye || status.MPI_TAG == kEnding) {
        p.left = status.MPI_TAG == kGoodbye;
        p.ending = status.MPI_TAG == kEnding;
        break;
      }
      MPI_Irecv(&p.in, 1, MPI_INT64_T, p.leader, MPI_ANY_TAG, leaders_, &p.recv);
    }
  }
}

void Heartbeat::say_goodbye() {
  const MpiOwnAccesses own;
  for (const Peer& p : peers_) {  // those that left too: they wait for it
    sends_.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&kPayload, 1, MPI_INT64_T, p.leader, kGoodbye, leaders_, &sends_.back());
  }
  said_goodbye_ = true;
}

bool Heartbeat::everyone_left() const {
  return std::all_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.left; });
}

void Heartbeat::declare_lost(double now) {
  std::vector<std::string> lost;
  const Peer* first_lost = nullptr;
  bool lowest_heard = true;  // no peer still heard has a lower rank than this leader
  for (const Peer& p : peers_) {
    if (p.left || p.ending) continue;
    if (now - p.heard > limit_s_) {
      lost.push_back(fmt::format("{} ({})", names_[p.leader], ranks_of(host_of_, p.world)));
      if (first_lost == nullptr) first_lost = &p;
    } else if (p.world < rank_) {
      lowest_heard = false;
    }
  }
  if (lost.empty()) return;
  if (lowest_heard) {
    const std::string line = fmt::format(
        "loom: error: [rank {} on {}] no heartbeat from host{} {} for {:g} s: the host is gone or the network to it is "
        "down; ending the job (LOOM_HEARTBEAT_S sets the limit)\n",
        rank_, names_[me_], lost.size() > 1 ? "s" : "", fmt::join(lost, " and "), limit_s_);
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
  }
  tell_ending(now, first_lost->leader, lowest_heard ? kReported : kYouReport);
  std::atomic_ref<int64_t>(*verdict_).store(first_lost->world + 1);
}

bool Heartbeat::follow_endings(double now) {
  const Peer* printed = nullptr;  // a leader that printed a line and told this one so
  for (const Peer& p : peers_) {
    if (!p.ending) continue;
    if (told_at_ < 0) told_at_ = now;
    if (p.in % 4 == kReported && printed == nullptr) printed = &p;
    if (p.in % 4 == kYouReport && relay_from_ == nullptr) relay_from_ = &p;
  }
  const bool reported = printed != nullptr;
  if (told_at_ < 0) return false;
  // Unless a line was printed, a request to report may still come, by a slower path than the
  // first message: this leader waits, and goes on watching (it may find a loss itself first).
  if (!reported && now < told_at_ + kRelayWaitIntervals * interval_s_) return false;
  const bool relay = relay_from_ != nullptr && !reported;
  int64_t lost = -1;
  if (relay) {
    lost = relay_from_->in / 4 - 1;
    const auto of = std::find_if(peers_.begin(), peers_.end(), [&](const Peer& p) { return p.leader == lost; });
    const std::string line = fmt::format(
        "loom: error: [rank {} on {}] host {} has had no heartbeat from host {} ({}) for {:g} s: the network "
        "between them is down; ending the job (LOOM_HEARTBEAT_S sets the limit)\n",
        rank_, names_[me_], names_[relay_from_->leader], names_[lost],
        of == peers_.end() ? "?" : ranks_of(host_of_, of->world), limit_s_);
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
  }
  // A line printed here, or by a lower leader that told this one: those told stop waiting and
  // print none. A leader cut off from the lower one that printed (h3 in a cut between h1 and h3)
  // would otherwise find the loss itself while it waits, with this leader no longer counted, and
  // print a second line. A leader below the one that printed is told nothing of it: it may be the
  // host cut off from the printer (h1 in a cut between h1 and h2, which h2 reported), whose own
  // line is the one its launcher can still read.
  if (relay) tell_ending(now, lost, kReported);
  else tell_ending(now, lost, reported ? kReported : kNothing, reported ? printed->leader : -1);
  std::atomic_ref<int64_t>(*verdict_).store(rank_ + 1);
  return true;
}

void Heartbeat::tell_ending(double now, int64_t lost, int64_t note, int64_t printer) {
  const MpiOwnAccesses own;
  const Peer* lowest = nullptr;  // the lowest leader still heard: asked to report when no one has
  for (const Peer& p : peers_)
    if (!p.left && !p.ending && now - p.heard <= limit_s_ && (lowest == nullptr || p.leader < lowest->leader))
      lowest = &p;
  std::vector<MPI_Request> sent;
  ending_notes_.assign(peers_.size(), 0);  // called once: each send's payload lives on with the object
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    if (p.left || p.ending || now - p.heard > limit_s_) continue;
    const bool unsaid = (note == kYouReport && &p != lowest) || (note == kReported && p.leader < printer);
    ending_notes_[i] = (lost + 1) * 4 + (unsaid ? kNothing : note);
    sent.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&ending_notes_[i], 1, MPI_INT64_T, p.leader, kEnding, leaders_, &sent.back());
  }
  // On their way before this thread stops calling MPI (one to a host cut off since may stay).
  int done = 0;
  for (const double until = now + 1; !done && seconds_now() < until; sleep_s(0.01))
    MPI_Testall(static_cast<int>(sent.size()), sent.data(), &done, MPI_STATUSES_IGNORE);
}

void Heartbeat::end_host() {
  interrupts_.acknowledge();  // the local peers ending now end as decided: the local watch stays quiet
  interrupts_.run_peer_loss_action();
  std::atomic_ref<int64_t> acted(*acted_);
  acted.fetch_add(1);
  const double until = seconds_now() + kActionWaitS;
  while (acted.load() < local_ranks_ && seconds_now() < until) sleep_s(0.01);
  // The launcher ends the job once it finds the host lost itself; a rank that ended first would
  // have it wait for the lost host's daemon to confirm the end (with Open MPI, until TCP gives up).
  sleep_s(kLauncherWaitS);
  ::_exit(1);
}

}  // namespace loom::dist::detail
