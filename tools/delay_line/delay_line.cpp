// NOTE [Delay line]: the test cluster's added delay (scripts/netns-cluster.sh --delay), where the
// kernel has no netem. A host's link is then a pair of TAP devices instead of a veth pair: `eth0`
// in the host's namespace and its twin on the cluster's bridge. This program carries the frames
// between the two. Those the host sends are held DELAY microseconds; those the bridge sends it
// pass at once. So a packet between two hosts takes DELAY one way, plus the rate shaping (tc tbf on
// the host's eth0), as on a link shaped by netem on each host's way out.
//
//   loom_delay_line NETNS HOST_TAP BRIDGE_TAP DELAY_US [--per-packet]
//
// NETNS is a namespace file (/var/run/netns/NAME) holding HOST_TAP; BRIDGE_TAP is in this process's
// namespace; both are persistent TAP devices (`ip tuntap add ... mode tap`). Once both are attached
// the program forks: the parent prints the child's pid and exits 0, the child carries frames until
// it is killed or a device goes away, silently. It exits 2 with one `loom: error:` line where it
// cannot attach.
//
// Frames carry a virtio header and may be TCP's large segments (up to 64 KiB, cut to the wire's
// MTU where they leave the cluster), so a 1 Gbit/s link costs a few thousand frames a second, not
// some 80,000. --per-packet turns that off: every frame is one wire packet, as a loss rule on the
// link needs so that it drops single packets (--loss). Frames that wait are kept in arrival order
// and leave no earlier than DELAY after they came (a real-time thread, where allowed, so that they
// leave on time while the ranks compute); the queue holds at most kMaxQueuedFrames frames and
// kMaxQueuedBytes bytes and drops the newest beyond, as a switch's buffer.
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kFrameBytes = 128 * 1024;  // above a 64 KiB segment with its virtio and Ethernet headers
constexpr size_t kMaxQueuedFrames = 4096;
constexpr size_t kMaxQueuedBytes = size_t{16} << 20;
constexpr int kReadsPerWake = 64;  // so that a steady stream in does not hold back the frames due

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "loom: error: loom_delay_line: %s: %s; hint: it needs root and the devices of "
               "scripts/netns-cluster.sh up --delay (scripts/netns-cluster.sh down removes a cluster left behind)\n",
               what.c_str(), std::strerror(errno));
  std::exit(2);
}

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// Attaches to the persistent TAP device `name` of the calling thread's network namespace.
int attach(const char* name, bool large_segments) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("open /dev/net/tun");
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) fail(std::string("attach to ") + name);
  const unsigned offload = large_segments ? TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 : 0;
  if (ioctl(fd, TUNSETOFFLOAD, offload) < 0) fail(std::string("set the offloads of ") + name);
  return fd;
}

struct Frame {
  int64_t due_ns;
  std::vector<char> bytes;
};

// Carries frames from `in` to `out`, each `delay_ns` after it came. Returns when `in` fails (its
// device gone). A frame that `out` refuses (its link down) is lost, as on a cable pulled.
void carry(int in, int out, int64_t delay_ns) {
  std::deque<Frame> queued;
  size_t queued_bytes = 0;
  std::vector<char> buffer(kFrameBytes);
  for (;;) {
    int64_t wait_ns = -1;
    if (!queued.empty()) wait_ns = std::max<int64_t>(0, queued.front().due_ns - now_ns());
    pollfd p{.fd = in, .events = POLLIN, .revents = 0};
    const timespec limit{.tv_sec = wait_ns / 1'000'000'000, .tv_nsec = wait_ns % 1'000'000'000};
    if (ppoll(&p, 1, wait_ns < 0 ? nullptr : &limit, nullptr) < 0 && errno != EINTR) return;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return;
    for (int i = 0; i < kReadsPerWake; ++i) {  // the frames that have come, then those due leave
      const ssize_t n = read(in, buffer.data(), buffer.size());
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (n <= 0) return;
      const auto size = static_cast<size_t>(n);
      if (size == buffer.size()) continue;  // larger than any frame a TAP device gives: cut short, lost
      if (delay_ns == 0) {
        (void)!write(out, buffer.data(), size);
      } else if (queued.size() < kMaxQueuedFrames && queued_bytes + size <= kMaxQueuedBytes) {
        queued.push_back(Frame{now_ns() + delay_ns, std::vector<char>(buffer.data(), buffer.data() + n)});
        queued_bytes += size;
      }
    }
    for (const int64_t t = now_ns(); !queued.empty() && queued.front().due_ns <= t; queued.pop_front()) {
      (void)!write(out, queued.front().bytes.data(), queued.front().bytes.size());
      queued_bytes -= queued.front().bytes.size();
    }
  }
}

// Closes every file but the two devices', the standard streams going to /dev/null.
// Both are 3 or above (main keeps 0 to 2 open before it opens them).
void keep_only(int a, int b) {
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0)
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
  const auto lo = static_cast<unsigned>(std::min(a, b)), hi = static_cast<unsigned>(std::max(a, b));
  if (lo > 3) close_range(3, lo - 1, 0);
  if (hi > lo + 1) close_range(lo + 1, hi - 1, 0);
  close_range(hi + 1, ~0U, 0);
}

// SCHED_FIFO where allowed: a frame then leaves on time though every core is busy with the ranks.
void prefer_real_time() {
  sched_param p{};
  p.sched_priority = 10;
  (void)sched_setscheduler(0, SCHED_FIFO, &p);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 6 || (argc == 6 && std::strcmp(argv[5], "--per-packet") != 0)) {
    std::fprintf(stderr, "loom: error: usage: loom_delay_line NETNS HOST_TAP BRIDGE_TAP DELAY_US [--per-packet]\n");
    return 2;
  }
  char* end = nullptr;
  const long long delay_us = std::strtoll(argv[4], &end, 10);
  if (*end != '\0' || delay_us < 0 || delay_us > 10'000'000) {
    std::fprintf(stderr, "loom: error: loom_delay_line: DELAY_US = '%s'; hint: microseconds, 0 to 10000000\n", argv[4]);
    return 2;
  }
  const bool large_segments = argc == 5;
  int fd = 0;  // the standard streams open, so that no device's file takes their number
  while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd < 3) {
  }
  if (fd < 0) fail("open /dev/null");
  close(fd);
  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) fail("open this process's namespace");
  const int host_ns = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (host_ns < 0) fail(std::string("open the namespace ") + argv[1]);
  if (setns(host_ns, CLONE_NEWNET) < 0) fail(std::string("enter ") + argv[1]);
  const int host = attach(argv[2], large_segments);  // a TAP device's file stays in its namespace
  if (setns(home, CLONE_NEWNET) < 0) fail("return to this namespace");
  const int bridge = attach(argv[3], large_segments);
  close(home);
  close(host_ns);

  const pid_t child = fork();
  if (child < 0) fail("fork");
  if (child > 0) {
    std::printf("%d\n", static_cast<int>(child));
    return 0;
  }
  setsid();  // and no file of the caller's (its pipes), whose reader would wait for them to close
  keep_only(host, bridge);
  prefer_real_time();
  std::thread up([&] {
    carry(host, bridge, delay_us * 1000);
    _exit(0);  // a device gone: the link is over both ways
  });
  carry(bridge, host, 0);
  _exit(0);
}
