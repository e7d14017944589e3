#!/usr/bin/env bash
# tests/cli/slurm.sh LOOM_BIN SOURCE_DIR (ctest cli.text.slurm, docs/slurm.md): starts a one-node
# Slurm on this machine (scripts/slurm/local-cluster.sh) and submits scripts/slurm/train.sbatch
# to it, so the example's srun line is what runs:
#   launch   2 tasks train gpt-tiny with dp=2 as one job: one header saying 2 ranks, rank 0's
#            metrics for every step, a checkpoint written by both ranks;
#   requeue  SIGTERM to the ranks mid-run (what --signal sends before the time limit): loom saves,
#            the script requeues the job, and the second start resumes with --resume auto and
#            finishes; every step is in the metrics once;
#   no PMI   srun --mpi=none with 2 tasks is refused on each task, and nothing is written.
# It needs root and Debian's slurm-wlm and munge; without them it fails saying so (it never
# passes without running). The daemons are stopped however the test ends.
set -euo pipefail

if [ "${3:-}" != --on-cluster ]; then
  self=$(realpath "$0")
  loom=$(realpath "$1")
  src=$(realpath "$2")
  work=$(mktemp -d "${TMPDIR:-/tmp}/loom-slurm-test.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  start=$SECONDS
  # The node states at least 2 CPUs, so the 2 ranks fit on a 1-core machine too (oversubscribed).
  cpus=${LOOM_SLURM_CPUS:-$(nproc)}
  if ! LOOM_SLURM_CPUS=$((cpus < 2 ? 2 : cpus)) "$src/scripts/slurm/local-cluster.sh" "$self" "$loom" "$src" --on-cluster; then
    echo "FAIL: cli.text.slurm (the lines above say why)" >&2
    exit 1
  fi
  echo "PASS: cli.text.slurm in $((SECONDS - start)) s"
  exit 0
fi

loom=$1
src=$2
tiny=$src/configs/gpt-tiny.toml
# One machine: shared memory between the ranks, without the single-copy mechanism that containers
# often forbid (as scripts/mpirun.sh). sbatch passes the environment on to the job.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none LOOM_BIN=$loom
# --time well beyond train.sbatch's --signal=TERM@300: with a limit under 300 s the time-limit
# signal is due at once and lands whenever slurmctld next checks, racing the test's own SIGTERM
# (a requeued start was signalled within a second of launching).
sbatch_args=(--parsable --nodes=1 --ntasks-per-node=2 --time=30)

fail() {
  echo "FAIL: $*" >&2
  for out in *.out; do [ -f "$out" ] && { echo "----- $out" >&2; cat "$out" >&2; }; done
  exit 1
}

# Polls a job until it ends (bounded); prints its JobState, ExitCode and Restarts.
wait_job() {
  local job=$1 limit=$2 info=""
  local deadline=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$deadline" ]; do
    info=$(scontrol --oneliner show job "$job")
    if [[ $info =~ JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) ]]; then
      grep -oE '(JobState|ExitCode|Restarts)=[^ ]*' <<<"$info" | tr '\n' ' '
      return
    fi
    sleep 0.5
  done
  fail "job $job did not end within $limit s: $info"
}

# The steps of a metrics file, one per line.
metric_steps() { grep -o '"step":[0-9]*' "$1" | cut -d: -f2; }

check_launch() {
  local job info
  job=$(sbatch "${sbatch_args[@]}" --output=launch.out --export=ALL,LOOM_RUN_DIR=launch \
    "$src/scripts/slurm/train.sbatch" "$tiny" --set parallel.dp=2 --set train.steps=3 --set train.warmup=0)
  info=$(wait_job "$job" 60)
  [[ $info == *JobState=COMPLETED* && $info == *ExitCode=0:0* ]] || fail "launch: the job did not complete: $info"
  [ "$(grep -c '^loom: .* parameters' launch.out)" -eq 1 ] || fail "launch: expected one header (rank 0's)"
  grep -q '^loom: .*; 2 ranks = dp 2 x ' launch.out || fail "launch: the header does not say 2 ranks = dp 2"
  [ "$(metric_steps launch/metrics.jsonl | tr '\n' ' ')" = "1 2 3 " ] || fail "launch: metrics are not steps 1 2 3"
  [ "$(cat launch/ckpt/latest)" = step-0000003 ] || fail "launch: no checkpoint of step 3"
  [ -f launch/ckpt/step-0000003/rank-00000.safetensors ] && [ -f launch/ckpt/step-0000003/rank-00001.safetensors ] ||
    fail "launch: the checkpoint lacks a file of rank 0 or 1"
  echo "launch: ok (2 ranks, 3 steps, checkpoint step-0000003)"
}

check_requeue() {
  local job info resumed
  job=$(sbatch "${sbatch_args[@]}" --output=requeue.out --export=ALL,LOOM_RUN_DIR=requeue \
    "$src/scripts/slurm/train.sbatch" "$tiny" --set parallel.dp=2 --set train.steps=6 --set train.warmup=0)
  local deadline=$((SECONDS + 60))
  until grep -q '^step 1/6' requeue.out 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "requeue: step 1 not reached within 60 s"
    sleep 0.2
  done
  scancel --signal=TERM "$job"  # to every rank, not the batch script: as --signal=TERM@SECONDS does
  info=$(wait_job "$job" 90)
  [[ $info == *JobState=COMPLETED* && $info == *ExitCode=0:0* ]] || fail "requeue: the job did not complete: $info"
  [[ $info == *Restarts=1* ]] || fail "requeue: the job was not requeued once: $info"
  grep -q '^loom: interrupted at step [0-9] by SIGTERM.*checkpoint: requeue/ckpt/step-' requeue.out ||
    fail "requeue: the first start did not save on SIGTERM"
  resumed=$(grep -o '^loom: resumed from requeue/ckpt/step-[0-9]* at step [0-9]*' requeue.out) ||
    fail "requeue: the second start did not resume"
  [ "$(metric_steps requeue/metrics.jsonl | tr '\n' ' ')" = "1 2 3 4 5 6 " ] || fail "requeue: metrics are not steps 1..6 once each"
  [ "$(cat requeue/ckpt/latest)" = step-0000006 ] || fail "requeue: no checkpoint of step 6"
  echo "requeue: ok (${resumed#loom: }, then step 6)"
}

check_no_pmi() {
  local status=0
  srun --mpi=none --ntasks=2 "$loom" train -c "$tiny" --set train.steps=1 --metrics nopmi.jsonl \
    >nopmi.out 2>&1 || status=$?
  [ "$status" -ne 0 ] || fail "no PMI: srun --mpi=none with 2 tasks ran"
  [ "$(grep -c '^loom: error: \[dist\] srun started 2 tasks without PMI' nopmi.out)" -eq 2 ] ||
    fail "no PMI: expected the refusal on both tasks"
  [ ! -e nopmi.jsonl ] || fail "no PMI: a metrics file was written"
  echo "no PMI: ok (refused on both tasks, nothing written)"
}

check_launch
check_requeue
check_no_pmi
