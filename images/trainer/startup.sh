#!/usr/bin/env bash
# trainstack trainer VM start-up script: runs as root at every boot (Deep Learning VM image).
#
# Reads the run from the instance metadata, starts a max_run_hours backstop, pulls the
# trainer image, waits for the GPU driver and runs `python -m trainer.vm run` in the image
# (the agent, which does the real work: trainer/vm/). Container exit codes: 0 = the run
# ended and the agent handled it; 143 = stopped by shutdown.sh (Spot preemption): nothing
# to do, the group recreates this VM and the run resumes; anything else = stop billing.
#
# Fatal errors stop the whole group from whichever node sees them: a broken image or
# driver breaks every node alike, node 0 may be the broken one, and the other nodes would
# wait for a rendezvous that never comes while billing GPUs. Resizing to 0 twice is
# harmless. Waits are overridable (TRAINSTACK_*) so tests run fast.
set -uo pipefail

MD="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/attributes"
NAME=trainstack-trainer
DRIVER_WAIT_S=${TRAINSTACK_DRIVER_WAIT_S:-600}
POLL_S=${TRAINSTACK_POLL_S:-10}
PULL_TRIES=${TRAINSTACK_PULL_TRIES:-5}
# The agent gets the first go at the deadline (SIGTERM, 25 s grace, FAILED status, resize).
WATCHDOG_GRACE_S=${TRAINSTACK_WATCHDOG_GRACE_S:-120}
WATCHDOG_POLL_S=${TRAINSTACK_WATCHDOG_POLL_S:-30}
WATCHDOG_LOG=${TRAINSTACK_WATCHDOG_LOG:-/var/log/trainstack-watchdog.log}
PROJECT='' ZONE='' MIG='' IMAGE='' RUN_ID='' TS_LANG='' BUCKET='' SHM='' MAX_HOURS=''
FLAGS=()

log() { echo "$(date -u +%FT%TZ) trainstack startup: $*"; }
md() { curl -sSf --retry 5 --retry-connrefused -H 'Metadata-Flavor: Google' "$MD/$1"; }

stop_group() {
  gcloud compute instance-groups managed resize "$MIG" --size 0 --zone "$ZONE" --project "$PROJECT" --quiet
}

# Leaves a note in the run folder, marks the run FAILED when the image is here, stops the group.
fatal() {
  local note
  log "FATAL: $*"
  if [[ -n $BUCKET && -n $RUN_ID ]]; then
    note=$(mktemp)
    echo "$(date -u +%FT%TZ) $(hostname): $*" >"$note"
    gcloud storage cp "$note" "$BUCKET/$TS_LANG/runs/$RUN_ID/vm/$(hostname)-startup-error.txt" ||
      log "could not write the note to the bucket"
  fi
  # The image, when this VM has it, can mark the run FAILED (the watchdog runs in a subshell
  # forked before the pull, so ask docker rather than a variable).
  if [[ -n $IMAGE ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    timeout 120 docker run --rm --network host --entrypoint python "$IMAGE" -m trainer.vm fail "$*" ||
      log "could not mark the run FAILED"
  fi
  stop_group || log "resize of $MIG to 0 failed"
  exit 1
}

# Seconds since the epoch when the run must be over: run-id start time + max_run_hours.
deadline() {
  local id=$1 start
  start=$(date -u -d "${id:0:4}-${id:4:2}-${id:6:2} ${id:9:2}:${id:11:2}:${id:13:2}" +%s 2>/dev/null) ||
    start=$(date +%s) # a hand-made run id: count from now, like the agent
  echo $((start + $(awk -v h="$MAX_HOURS" 'BEGIN { printf "%d", h * 3600 }')))
}

watchdog() {
  local end
  end=$(deadline "$RUN_ID")
  end=$((end + WATCHDOG_GRACE_S))
  while (($(date +%s) < end)); do sleep "$WATCHDOG_POLL_S"; done
  fatal "max_run_hours=$MAX_HOURS passed (run $RUN_ID): the backstop stopped the group"
}

read_group() { PROJECT=$(md trainstack-project) && ZONE=$(md trainstack-zone) && MIG=$(md trainstack-mig); }
# Fallback: every group member carries created-by = projects/NUMBER/zones/ZONE/instanceGroupManagers/NAME
# (gcloud takes the project number), so even a misconfigured stack can stop its own billing.
read_created_by() {
  local by
  by=$(md created-by) && [[ $by == projects/*/zones/*/instanceGroupManagers/* ]] || return 1
  PROJECT=$(cut -d/ -f2 <<<"$by") ZONE=$(cut -d/ -f4 <<<"$by") MIG=$(cut -d/ -f6 <<<"$by")
}
read_run() {
  IMAGE=$(md trainstack-image) && RUN_ID=$(md trainstack-run-id) && TS_LANG=$(md trainstack-lang) &&
    BUCKET=$(md trainstack-bucket) && SHM=$(md trainstack-shm-size) &&
    MAX_HOURS=$(md trainstack-max-run-hours) && flags=$(md trainstack-docker-flags)
}

if ! read_group; then
  if read_created_by; then
    fatal "cannot read trainstack-project/zone/mig from the instance metadata (stack misconfigured)"
  fi
  log "FATAL: cannot read trainstack-project/zone/mig from the instance metadata, nor created-by"
  exit 1
fi
read_run || fatal "cannot read the trainstack-* instance metadata"
flags=$(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$flags") ||
  fatal "trainstack-docker-flags is not a JSON list of strings: $flags"
if [[ -n $flags ]]; then mapfile -t FLAGS <<<"$flags"; fi
log "run $RUN_ID ($TS_LANG), image $IMAGE, group $MIG"

# Detached from this script's output so that it can outlive it (two after a manual rerun are harmless).
watchdog </dev/null >>"$WATCHDOG_LOG" 2>&1 &

# Pull first: the Deep Learning VM installs its driver meanwhile, and the image can then
# record a driver failure in status.json.
gcloud auth configure-docker "${IMAGE%%/*}" --quiet || log "configure-docker failed; trying the pull anyway"
for ((try = 1; ; try++)); do
  docker pull "$IMAGE" && break
  ((try >= PULL_TRIES)) && fatal "docker pull $IMAGE failed $PULL_TRIES times"
  sleep $((POLL_S * try))
done

waiting_since=$SECONDS
until nvidia-smi >/dev/null 2>&1; do
  ((SECONDS - waiting_since >= DRIVER_WAIT_S)) && fatal "GPU driver not ready after ${DRIVER_WAIT_S}s (nvidia-smi fails)"
  sleep "$POLL_S"
done

docker rm -f "$NAME" >/dev/null 2>&1 # a container left by an earlier boot of this disk
# --stop-timeout: if docker itself stops the container at shutdown (its service may stop
# alongside the shutdown script), the trainer still gets the Spot notice to checkpoint.
docker run --rm --name "$NAME" --init --stop-timeout 25 --gpus all --shm-size "$SHM" --network host "${FLAGS[@]}" \
  -e PYTHONUNBUFFERED=1 --entrypoint python "$IMAGE" -m trainer.vm run
code=$?
case $code in
0) log "the run ended; the agent has handled it" ;;
143) log "stopped by the shutdown script (preemption?): the group recreates this VM and the run resumes" ;;
*) fatal "container $NAME exited with code $code (see the run's status.json and log.txt)" ;;
esac
