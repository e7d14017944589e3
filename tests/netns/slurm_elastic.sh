#!/usr/bin/env bash
# NOTE [Elastic restart] under Slurm: a Slurm of 2 nodes made of the test cluster's 2 hosts x 2
# slots (scripts/slurm/local-cluster.sh with LOOM_SLURM_NETNS=1, NOTE [Test cluster]) runs
# scripts/slurm/train-elastic.sbatch: 12 steps, a checkpoint every 2, each start's layout planned
# on the nodes' cluster file (`loom profile --cluster-out` run by srun across them). Rank 2
# (node 2) stops at step 6 (LOOM_FAULT hang); once the checkpoint of step 6 is written, node 2
# freezes (its link down, its processes stopped, slurmd included: a power cut). The heartbeat ends
# the run, node 2 does not answer srun, and the job, still alive (--no-kill), starts again on node
# 1 alone (2 ranks) with --resume auto and finishes. The job completes, and its final weights
# equal the uninterrupted serial run's in float64 at 1e-9 relative.
# Exits 77 (ctest: skipped) with the reason where namespaces cannot be made; fails, saying so,
# without Slurm (scripts/install-deps.sh installs it).
#   usage: slurm_elastic.sh LOOM
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; for f in job.out err.txt; do [ -s $f ] && { echo "--- $f"; tail -30 $f; }; done; exit 1; }
source "$root/tests/netns/cluster_test.sh"
tiny_model --set train.global_batch=8 --set train.micro_batch=2 --set train.steps=12

if [ "${2:-}" != --on-slurm ]; then
  cluster_test looms 10.71.0 "$1"
  cd "$work"
  "$loom" train "${tiny[@]}" --quiet --set checkpoint.dir=serial 2> err.txt || fail "the serial run"
  "$loom" ckpt export serial --dtype float64 --out serial.safetensors > /dev/null
  rc=0
  "$cluster" up 2 --slots 2 > /dev/null || rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  LOOM_SLURM_NETNS=1 "$root/scripts/slurm/local-cluster.sh" "$root/tests/netns/slurm_elastic.sh" "$loom" --on-slurm ||
    fail "the elastic job under Slurm (the lines above say why)"
  "$loom" ckpt export run/ckpt --dtype float64 --out elastic.safetensors > /dev/null
  "$root/tests/netns/same_weights.py" "after losing node 2 at step 6, the weights" elastic.safetensors \
    serial.safetensors || fail "the elastic job's weights differ from the serial run's"
  exit 0
fi

# On the Slurm of the test cluster, in the working folder: the job, the fault, the checks.
loom=$1
# The nodes' ranks talk over TCP between hosts and shared memory within one; sbatch passes the
# environment on to the job, and srun to its tasks.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include="$LOOM_CLUSTER_SUBNET.0/24"
export OMPI_MCA_btl_vader_single_copy_mechanism=none LOOM_BIN=$loom LOOM_RUN_DIR=run
ended() { scontrol --oneliner show job "$1" | grep -oE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)'; }
# The nodes' cluster file, profiled by srun across them; each start's layout is planned on it.
srun --mpi=pmix -N 2 -n 4 "$loom" profile "${tiny[@]}" --cluster-out nodes.toml > profile.txt 2> err.txt ||
  fail "loom profile --cluster-out across the nodes"
grep -q '^per_node = 2$' nodes.toml && grep -q '^max_nodes = 2$' nodes.toml || fail "nodes.toml is not 2 nodes x 2"
# The job starts in the submit folder, and finds the scripts under LOOM_SRC.
job=$(LOOM_SRC=$root LOOM_FAULT="rank=2,step=6,kind=hang" sbatch --parsable --nodes=2 --ntasks-per-node=2 --time=30 \
  --output="$PWD/job.out" "$root/scripts/slurm/train-elastic.sbatch" --cluster nodes.toml --probe-s 15 -- \
  "${tiny[@]}" --set checkpoint.every=2)
for _ in $(seq 1200); do [ -e run/ckpt/step-0000006/manifest.json ] || ended "$job" > /dev/null && break; sleep 0.1; done
[ -e run/ckpt/step-0000006/manifest.json ] || fail "no checkpoint of step 6 within 120 s"
ip link set "${LOOM_CLUSTER}v2" down
ip netns pids "$LOOM_CLUSTER-h2" | xargs -r kill -STOP
state=""
for _ in $(seq 2400); do state=$(ended "$job") && break; sleep 0.1; done
[ "$state" = JobState=COMPLETED ] || fail "the job did not complete within 240 s of node 2 freezing: $state"
grep -q "no heartbeat from host $LOOM_CLUSTER-h2 (ranks 2, 3)" job.out || fail "no heartbeat line"
grep -q "host $LOOM_CLUSTER-h2 .*does not answer" job.out || fail "node 2 was not found gone"
grep -q "start 2 on 1 host(s), 2 ranks" job.out || fail "no second start on 1 node"
grep -q "resumed from run/ckpt/step-0000006 at step 6" job.out || fail "the second start did not resume from step 6"
grep -E "launch-elastic|no heartbeat" job.out
