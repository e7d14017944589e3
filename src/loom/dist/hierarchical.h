#pragma once
// NOTE [Hierarchical all-reduce]: a group whose ranks lie on several hosts, 2 or more on each and
// as many on each, all-reduces in three steps:
//   1. an all-reduce among the group's ranks of each host, through shared memory;
//   2. an all-reduce of the hosts' sums among one rank per host (the host's lowest, its leader);
//   3. a broadcast from the leader to the other ranks of its host.
// Only step 2 crosses the network, one stream per host (between 2 hosts, the leaders exchange
// their sums: NOTE [Pair all-reduce] in mpi_communicator.cpp): each host sends 2 (H - 1) / H of the
// buffer over its link (H hosts), where the flat ring over all n ranks sends 2 (n - 1) / n through
// the link a host's consecutive ranks share: 1.5x less at 2 hosts x 2 ranks, 2x less as n grows.
// (A reduce-scatter within the host would send as much, as L streams of an L-th each, then an
// all-gather. On the test cluster's one shaped link per host, with 1 ms of delay, it ran at
// 0.89-0.97x the leader's bus bandwidth at 16 and 64 MiB in two rounds: docs/benchmarks.md. Hosts
// with a link per rank would want it.) Open MPI 4.1's hierarchical component (coll/han) has the
// same plan, but its all-reduce crashed here (bench/hosts.py, docs/multi-host.md), so loom does
// it, for MPI groups that span hosts (mpi_communicator.cpp).
//
// The buffer goes through the steps in pieces (kLevelsPieceBytes), one after another on each
// communicator, so that the steps of consecutive pieces overlap: while one piece crosses the
// hosts, the next is summed within the host and the one before broadcast. The link then stays busy
// and the within-host steps hide under it, as the flat ring keeps every link busy at once. Run one
// after the other over the whole buffer, the steps lost to the ring above 4 MiB; in 1 MiB pieces
// they beat it at every size measured, 1 to 64 MiB (the test cluster: docs/benchmarks.md). The
// planner prices gradient buckets so (plan::Cluster::levels_all_reduce_seconds).
// The sums are added in another order than the flat algorithm's, as any other reduction
// algorithm's: equal up to rounding, and the same from one launch to the next on the same hosts
// (the pieces are cut by size alone).
//
// A piece posts its next step when this rank tests or waits on one of the group's all-reduces: a
// rank that waits on one may wait for a peer's next test or wait. loom's callers (gradient buckets,
// sparse tables) test and wait at the same points on every rank of a group. The blocking form is
// the non-blocking one waited on. One abandoned part-way (an error unwinding towards ending the
// job) leaves the group's later all-reduces unusable.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "loom/dist/communicator.h"

namespace loom::dist {

class LevelsWork;

// A group's ranks by host: `node` (and its twin `node_share`, for step 3) holds this rank's host's
// ranks of the group, `cross` the hosts' leaders (on a leader; null elsewhere); `size` is the group's.
// Each rank posts the collectives of a communicator in the same order: the pieces' first steps as
// the all-reduces start (the program's order), each later step only after the piece before has
// posted it, oldest all-reduce first (`flight`), whichever rank's steps end first. Whoever tests
// or waits on one all-reduce moves every piece on that can move, under `mutex`.
struct HostLevels {
  std::unique_ptr<Communicator> node, node_share, cross;
  int size = 1;
  int64_t piece_bytes = 0;
  std::mutex mutex;
  std::deque<LevelsWork*> flight;
};

// The pieces' size (see the NOTE): large enough that a piece's three collectives cost little beside
// its bytes, small enough that a gradient bucket (25 MB) makes many.
constexpr int64_t kLevelsPieceBytes = int64_t{1} << 20;

// The hosts a group spans where it takes the levels (2 or more, as many of its ranks on each, 2 or
// more), from its ranks on each host; 0 where it does not. The planner asks the same of a mesh's
// groups (plan::group_levels_nodes).
int64_t levels_hosts(const std::map<int64_t, int64_t>& ranks_on);

// Collective over `group`: the levels when its ranks lie on 2 hosts or more with as many on each,
// 2 or more (`host`: this rank's Communicator::host()); null otherwise.
std::shared_ptr<HostLevels> host_levels(Communicator& group, int host, int64_t piece_bytes = kLevelsPieceBytes);

// `t` all-reduced through the levels, as Communicator::all_reduce(_async) would. The Work keeps
// the levels alive.
void hierarchical_all_reduce(const std::shared_ptr<HostLevels>& levels, at::Tensor& t, ReduceOp op);
WorkPtr hierarchical_all_reduce_async(const std::shared_ptr<HostLevels>& levels, at::Tensor& t, ReduceOp op);

}  // namespace loom::dist
