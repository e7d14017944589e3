#pragma once
// NOTE [Hierarchical all-reduce]: a group whose ranks lie on several hosts, 2 or more on each and
// as many on each, all-reduces in three steps:
//   1. an all-reduce among the group's ranks of each host, through shared memory;
//   2. an all-reduce of the hosts' sums among one rank per host (the host's lowest, its leader);
//   3. a broadcast from the leader to the other ranks of its host.
// Only step 2 crosses the network, one stream per host: each host sends 2 (H - 1) / H of the
// buffer over its link (H hosts), where the flat ring over all n ranks sends 2 (n - 1) / n through
// the link a host's consecutive ranks share: 1.5x less at 2 hosts x 2 ranks, 2x less as n grows.
// (A reduce-scatter within the host would send as much, as L streams of an L-th each; on the test
// cluster's shaped TCP links those streams stalled one another.) Open MPI 4.1's hierarchical
// component (coll/han) has the same plan, but its all-reduce crashed here (bench/hosts.py,
// docs/multi-host.md), so loom does it, for MPI groups that span hosts (mpi_communicator.cpp).
//
// Up to kHierarchicalMaxBytes only. The three steps run one after the other, where the flat ring
// keeps every link busy at once: measured on the test cluster (2 hosts x 2 ranks on 2 cores, links
// shaped to 1 Gbit/s), the levels' bus bandwidth was 2.2-2.4x the ring's at 1 MiB, 0.8-1.2x at
// 4 MiB and 0.7-0.8x at 16 and 64 MiB. Cutting the buffer into pieces that go through the steps
// in a pipeline would take the large ones too.
// The sums are added in another order than the flat algorithm's, as any other reduction
// algorithm's: equal up to rounding, and the same from one launch to the next on the same hosts.
//
// The blocking form first finishes the group's all-reduces under way, then runs MPI's blocking
// collectives (its tuned algorithms). In the non-blocking form a step after the first is posted
// when this rank tests or waits on one of the group's all-reduces: a rank that waits on one may
// wait for a peer's next test or wait. loom's callers (gradient buckets, sparse tables) test and
// wait at the same points on every rank of a group. One abandoned part-way (an error unwinding
// towards ending the job) leaves the group's later all-reduces unusable.
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "loom/dist/communicator.h"

namespace loom::dist {

class LevelsWork;

// A group's ranks by host: `node` (and its twin `node_share`, for step 3) holds this rank's host's
// ranks of the group, `cross` the hosts' leaders (on a leader; null elsewhere); `size` is the group's.
// Each rank posts the collectives of a communicator in the same order: the first steps as the
// all-reduces start (the program's order), and only the oldest all-reduce under way (`flight`)
// goes past its first step, whichever rank's first step ends first, so the later steps keep that
// order too. Whoever tests or waits on one all-reduce moves the oldest on, under `mutex`.
struct HostLevels {
  std::unique_ptr<Communicator> node, node_share, cross;
  int size = 1;
  std::mutex mutex;
  std::deque<LevelsWork*> flight;
};

// The largest all-reduce that takes the levels (see the NOTE).
constexpr int64_t kHierarchicalMaxBytes = int64_t{2} << 20;

// Collective over `group`: the levels when its ranks lie on 2 hosts or more with as many on each,
// 2 or more (`host`: this rank's Communicator::host()); null otherwise.
std::shared_ptr<HostLevels> host_levels(Communicator& group, int host);

// `t` all-reduced through the levels, as Communicator::all_reduce(_async) would. The Work keeps
// the levels alive.
void hierarchical_all_reduce(HostLevels& levels, at::Tensor& t, ReduceOp op);
WorkPtr hierarchical_all_reduce_async(const std::shared_ptr<HostLevels>& levels, at::Tensor& t, ReduceOp op);

}  // namespace loom::dist
