#pragma once
// NOTE [Hierarchical all-reduce]: a group whose ranks lie on several hosts, as many on each (L),
// all-reduces in three steps:
//   1. a reduce-scatter among the group's ranks of each host (through shared memory): each holds
//      the host's sum of one L-th of the buffer;
//   2. an all-reduce of that L-th among the ranks holding the same L-th on the other hosts;
//   3. an all-gather among the ranks of each host.
// Only step 2 crosses the network: each host sends 2 (H - 1) / H of the buffer over its link (H
// hosts), where the flat ring over all n ranks sends 2 (n - 1) / n through the one link a host's
// consecutive ranks share: 1.5x less at 2 hosts x 2 ranks, 2x less as n grows. Open MPI 4.1's
// hierarchical component (coll/han) does the same, but its all-reduce crashed here (bench/hosts.py,
// docs/multi-host.md), so loom does it for every MPI group that spans hosts (mpi_communicator.cpp),
// whatever the size (the intra-host steps cost microseconds). The sums are added in another order
// than the flat algorithm's, as any other reduction algorithm's: equal up to rounding, and the
// same from one launch to the next on the same hosts.
#include <deque>
#include <memory>
#include <mutex>

#include "loom/dist/communicator.h"

namespace loom::dist {

class LevelsWork;

// A group's ranks by host: `node` (and its twin `node_gather`, for step 3) holds this rank's host's
// ranks of the group, `cross` the ranks at this rank's index on every host; `size` is the group's.
// Each rank posts the collectives of a communicator in the same order: the reduce-scatters as the
// all-reduces start (the program's order), and only the oldest all-reduce under way (`flight`)
// goes past its first step, whichever rank's first step ends first, so the later steps keep that
// order too. Whoever tests or waits on one all-reduce moves the oldest on, under `mutex`.
struct HostLevels {
  std::unique_ptr<Communicator> node, node_gather, cross;
  int size = 1;
  std::mutex mutex;
  std::deque<LevelsWork*> flight;
};

// Collective over `group`: the levels when its ranks lie on 2 hosts or more with as many on each,
// 2 or more (`host`: this rank's Communicator::host()); null otherwise.
std::unique_ptr<HostLevels> host_levels(Communicator& group, int host);

// `t` all-reduced through the levels, as Communicator::all_reduce(_async) would.
void hierarchical_all_reduce(HostLevels& levels, at::Tensor& t, ReduceOp op);
WorkPtr hierarchical_all_reduce_async(HostLevels& levels, at::Tensor& t, ReduceOp op);

}  // namespace loom::dist
