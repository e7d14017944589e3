#pragma once
// NOTE [Hosts in the mesh]: tp and sp exchange every layer's activations, so their groups belong
// within one machine, where the exchange goes through shared memory; dp and pp exchange once per
// step or per micro-batch and may cross the network. The mesh puts tp innermost (NOTE [Mesh
// axes]), so with each host's ranks consecutive and a multiple of tp x sp per host no such group
// crosses a machine. Which host a rank is on comes from the communicator (Communicator::host).
#include <string>
#include <vector>

#include "loom/dist/mesh.h"

namespace loom::dist {

// One warning line when a tp or sp group of the mesh spans hosts, "" when none does (whether it
// is empty is the same on every rank; rank 0 prints it). A collective over the world: every rank
// calls it.
std::string host_span_warning(Mesh& mesh);

// The hosts of a job: element r is world rank r's Communicator::host(). A collective over `world`.
std::vector<int> hosts_of_ranks(Communicator& world);

// What a cluster of nodes needs of the job's hosts (plan/cluster.h): each host's ranks consecutive
// and as many on every host. Their count per host; 0 where the hosts differ or interleave.
int ranks_per_host(const std::vector<int>& host_of);

}  // namespace loom::dist
