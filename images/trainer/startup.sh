#!/usr/bin/env bash
# trainstack trainer VM start-up script: runs as root at every boot.
#
# Starts a max_run_hours backstop first, then reads the run from the instance metadata,
# prepares the GPU container runtime (Deep Learning VM: the NVIDIA container toolkit;
# Container-Optimized OS: its GPU driver installer; on COS, with several nodes, its host firewall
# is opened to the node subnet), pulls the trainer image and runs
# `python -m trainer.launchers.vm run` in it (the agent, which does the real work: trainer/launchers/vm/).
# Google APIs are called with curl and the VM account's token from the metadata server, so
# no gcloud is needed (COS has none). Container exit codes: 0 = the run ended and the agent
# handled it; 143 = stopped by shutdown.sh (Spot preemption): nothing to do, the group
# recreates this VM and the run resumes; anything else = stop billing.
#
# Nothing is fatal while this VM is going away (Spot preemption, shutdown): Docker then
# kills the container (137) or its client fails as dockerd stops (125), and the run must
# stay resumable. Fatal errors stop the whole group from whichever node sees them: a
# broken image or driver breaks every node alike, node 0 may be the broken one, and the
# other nodes would wait for a rendezvous that never comes while billing GPUs. Resizing to
# 0 twice is harmless. Waits are overridable (TRAINSTACK_*) so tests run fast.
set -uo pipefail

MD_ROOT="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance"
MD="$MD_ROOT/attributes"
NAME=trainstack-trainer
DRIVER_WAIT_S=${TRAINSTACK_DRIVER_WAIT_S:-600}
DOCKER_WAIT_S=${TRAINSTACK_DOCKER_WAIT_S:-300}
DOCKER_POLL_S=${TRAINSTACK_DOCKER_POLL_S:-2}
POLL_S=${TRAINSTACK_POLL_S:-10}
PULL_TRIES=${TRAINSTACK_PULL_TRIES:-5}
# The agent gets the first go at the deadline (SIGTERM, 25 s grace, FAILED status, resize).
WATCHDOG_GRACE_S=${TRAINSTACK_WATCHDOG_GRACE_S:-120}
WATCHDOG_POLL_S=${TRAINSTACK_WATCHDOG_POLL_S:-30}
WATCHDOG_LOG=${TRAINSTACK_WATCHDOG_LOG:-/var/log/trainstack-watchdog.log}
# Until the metadata names the run's own deadline: the longest max_run_hours config allows.
BACKSTOP_HOURS=${TRAINSTACK_BACKSTOP_HOURS:-168}
# shutdown.sh drops a flag here; /run is a tmpfs, so a flag never outlives its boot.
# The agent sees the folder read-only inside the container.
STATE_DIR=${TRAINSTACK_STATE_DIR:-/run/trainstack}
SHUTDOWN_FLAG="$STATE_DIR/shutting-down"
OS_RELEASE=${TRAINSTACK_OS_RELEASE:-/etc/os-release}
COMPUTE_API=${TRAINSTACK_COMPUTE_API:-https://compute.googleapis.com/compute/v1}
STORAGE_API=${TRAINSTACK_STORAGE_API:-https://storage.googleapis.com}
# Writable on every image (COS mounts / read-only): where `docker login` keeps the registry token.
export DOCKER_CONFIG=${TRAINSTACK_DOCKER_CONFIG:-/var/lib/trainstack/docker}
PROJECT='' ZONE='' MIG='' IMAGE='' RUN_ID='' TS_LANG='' BUCKET='' SHM='' MAX_HOURS='' flags='' OS_ID=''
FLAGS=() GPU_FLAGS=()

log() { echo "$(date -u +%FT%TZ) trainstack startup: $*"; }
md() { curl -sSf --retry 5 --retry-connrefused -H 'Metadata-Flavor: Google' "$MD/$1"; }
# One quick try: asked while the VM may be going away.
md_instance() { curl -sSf --max-time 5 -H 'Metadata-Flavor: Google' "$MD_ROOT/$1"; }
md_nic() { curl -sSf --retry 5 --retry-connrefused -H 'Metadata-Flavor: Google' "$MD_ROOT/network-interfaces/0/$1"; }
# The VM service account's access token (JSON from the metadata server, no jq on COS).
token() {
  md_instance service-accounts/default/token | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p' | grep .
}
# api METHOD URL [curl args...]: a Google API call as the VM's service account.
api() {
  local method=$1 url=$2 tok
  shift 2
  tok=$(token) || return 1
  curl -sSf --retry 3 --max-time 60 -X "$method" -H "Authorization: Bearer $tok" "$@" "$url" >/dev/null
}

# Prints why this VM is going away and succeeds, or fails when it is not.
host_stopping() {
  if [[ -e $SHUTDOWN_FLAG ]]; then
    echo "the shutdown script has started"
  elif [[ $(systemctl is-system-running 2>/dev/null) == stopping ]]; then
    echo "the system is shutting down"
  elif [[ $(md_instance preempted 2>/dev/null) == TRUE ]]; then
    echo "Compute Engine preempted this Spot VM"
  else
    return 1
  fi
}

read_group() { PROJECT=$(md trainstack-project) && ZONE=$(md trainstack-zone) && MIG=$(md trainstack-mig); }
# Fallback: every group member carries created-by = projects/NUMBER/zones/ZONE/instanceGroupManagers/NAME
# (the Compute API takes the project number), so even a misconfigured stack can stop its own billing.
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

# Stops this VM's GPUs by the first means that works: its group resized to 0 (named by the
# stack's metadata, else by created-by), else powering off. A powered-off member may be
# repaired by its group, but a VM that cannot name its group cannot run a run either.
stop_billing() {
  if [[ -n $MIG ]] || read_group || read_created_by; then
    # Not waiting for the operation: deleting the group's VMs deletes this one.
    api POST "$COMPUTE_API/projects/$PROJECT/zones/$ZONE/instanceGroupManagers/$MIG/resize?size=0" && return 0
    log "resize of $MIG to 0 failed"
  else
    log "cannot tell which instance group this VM belongs to (no trainstack-mig, no created-by)"
  fi
  log "powering this VM off"
  shutdown -h now
}

# Leaves a note in the run folder, marks the run FAILED when the image is here, stops billing.
fatal() {
  local note why obj bucket
  if why=$(host_stopping); then
    log "not fatal, $why: $* (the run stays resumable; the group recreates this VM)"
    exit 0
  fi
  log "FATAL: $*"
  if [[ -n $BUCKET && -n $RUN_ID ]]; then
    note=$(mktemp)
    echo "$(date -u +%FT%TZ) $(hostname): $*" >"$note"
    bucket=${BUCKET#gs://} obj="$TS_LANG/runs/$RUN_ID/vm/$(hostname)-startup-error.txt"
    api POST "$STORAGE_API/upload/storage/v1/b/${bucket%%/*}/o?uploadType=media&name=${obj//\//%2F}" \
      -H 'Content-Type: text/plain' --data-binary "@$note" || log "could not write the note to the bucket"
  fi
  # The image, when this VM has it, can mark the run FAILED (the watchdog runs in a subshell
  # forked before the pull, so ask docker rather than a variable).
  if [[ -n $IMAGE ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    timeout 120 docker run --rm --network host --entrypoint python "$IMAGE" -m trainer.launchers.vm fail "$*" ||
      log "could not mark the run FAILED"
  fi
  stop_billing
  exit 1
}

# Seconds since the epoch when the run must be over: run-id start time + max_run_hours.
deadline() {
  local id=$1 hours=$2 start
  start=$(date -u -d "${id:0:4}-${id:4:2}-${id:6:2} ${id:9:2}:${id:11:2}:${id:13:2}" +%s 2>/dev/null) ||
    start=$BOOTED_AT # a hand-made run id: count from boot, like the agent
  echo $((start + $(awk -v h="$hours" 'BEGIN { printf "%d", h * 3600 }')))
}

# Started before anything that can fail or hang: whatever happens next, billing stops.
watchdog() {
  local end=$((BOOTED_AT + BACKSTOP_HOURS * 3600 + WATCHDOG_GRACE_S)) id='' hours=''
  while (($(date +%s) < end)); do
    if [[ -z $id ]] && id=$(md trainstack-run-id 2>/dev/null) && hours=$(md trainstack-max-run-hours 2>/dev/null); then
      end=$(($(deadline "$id" "$hours") + WATCHDOG_GRACE_S))
      continue
    fi
    [[ -n $hours ]] || id=''
    sleep "$WATCHDOG_POLL_S"
  done
  read_run >/dev/null 2>&1 # for the note and the FAILED status, when the metadata has them
  if [[ -n $hours ]]; then
    fatal "max_run_hours=$hours passed (run $id): the backstop stopped the group"
  fi
  fatal "the run's metadata never became readable within ${BACKSTOP_HOURS} h of boot: the backstop stopped the VM"
}

# A JSON list of strings, one per line: with the host's python3, else (COS may have none)
# with the trainer image's, once pulled.
json_lines() {
  local code='import json, sys; v = json.loads(sys.argv[1]); assert all(isinstance(a, str) for a in v); print("\n".join(v))'
  if command -v python3 >/dev/null; then
    python3 -c "$code" "$1"
  else
    docker run --rm --network none --entrypoint python "$IMAGE" -c "$code" "$1"
  fi
}

# Google's COS GPU page: the driver installer runs in a container pulled from gcr.io, so
# gcr-online.target and docker.socket must be active first; at boot they may not be yet.
# Bounded: after DOCKER_WAIT_S the install is tried anyway and its own failure is fatal.
wait_for_docker() {
  local since=$SECONDS waited=0
  until systemctl is-active --quiet gcr-online.target docker.socket; do
    if ((SECONDS - since >= DOCKER_WAIT_S)); then
      log "gcr-online.target / docker.socket still not active after ${DOCKER_WAIT_S}s; installing the driver anyway"
      return 0
    fi
    ((waited)) || log "waiting for gcr-online.target and docker.socket before the driver install"
    waited=1
    sleep "$DOCKER_POLL_S"
  done
  ((waited)) && log "gcr-online.target and docker.socket are active ($((SECONDS - since))s)"
  return 0
}

# Container-Optimized OS has no NVIDIA container toolkit: its GPU installer puts the driver
# under /var/lib/nvidia, which the container gets as volumes and devices. Other images
# (Deep Learning VM, accelerator images) ship the toolkit: `--gpus all`.
prepare_gpu_runtime() {
  local dev
  if [[ $OS_ID != cos ]]; then
    GPU_FLAGS=(--gpus all)
    return 0
  fi
  wait_for_docker
  cos-extensions install gpu -- "-version=${GPU_DRIVER:-latest}" || return 1
  mount --bind /var/lib/nvidia /var/lib/nvidia || return 1
  mount -o remount,exec /var/lib/nvidia || return 1
  export PATH="/var/lib/nvidia/bin:$PATH"
  GPU_FLAGS=(--volume /var/lib/nvidia/lib64:/usr/local/nvidia/lib64 --volume /var/lib/nvidia/bin:/usr/local/nvidia/bin
    -e LD_LIBRARY_PATH=/usr/local/nvidia/lib64)
  for dev in /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
    [[ -e $dev ]] && GPU_FLAGS+=(--device "$dev")
  done
  return 0
}

# Container-Optimized OS's host firewall lets in SSH only, and the trainer runs on the host
# network: the other nodes could not reach node 0's rendezvous store, nor NCCL and gloo any node
# (ports torch and NCCL pick at run time, so every TCP port).
open_host_firewall() {
  local ip mask rule
  ip=$(md_nic ip) && mask=$(md_nic subnetmask) || return 1
  # The node subnet (iptables masks ip/mask): the group's VMs share it, and the VPC rule
  # (stacks/constructs/node_firewall.py) already lets in only the env's trainer VMs.
  rule=(INPUT -p tcp -s "$ip/$mask" -j ACCEPT)
  iptables -w -C "${rule[@]}" 2>/dev/null || iptables -w -I "${rule[@]}" || return 1
  log "host firewall: accepting TCP from the node subnet $ip/$mask"
}

BOOTED_AT=$(date +%s)
mkdir -p "$STATE_DIR"
# Detached from this script's output so that it can outlive it (two after a manual rerun are harmless).
watchdog </dev/null >>"$WATCHDOG_LOG" 2>&1 &

read_group || fatal "cannot read trainstack-project/zone/mig from the instance metadata (stack misconfigured)"
read_run || fatal "cannot read the trainstack-* instance metadata"
GPU_DRIVER=$(md trainstack-gpu-driver 2>/dev/null) || GPU_DRIVER=''
NODES=$(md trainstack-nodes 2>/dev/null) || NODES=1
# shellcheck disable=SC1090
[[ -r $OS_RELEASE ]] && OS_ID=$(. "$OS_RELEASE" && echo "${ID:-}")
log "run $RUN_ID ($TS_LANG), image $IMAGE, group $MIG, max_run_hours $MAX_HOURS"

if [[ $OS_ID == cos && $NODES != 1 ]]; then
  open_host_firewall || fatal "could not open the host firewall to the other nodes (iptables, network-interfaces/0 metadata)"
fi

command -v docker >/dev/null || fatal "the boot image has no docker: pick a boot image from the GPU catalogue (stacks/targets/gcp/catalogue.yaml)"
prepare_gpu_runtime || fatal "could not install or mount the GPU driver (cos-extensions install gpu -- -version=${GPU_DRIVER:-latest})"

# Pull first: a Deep Learning VM installs its driver meanwhile, and the image can then
# record a driver failure in status.json.
token | docker login -u oauth2accesstoken --password-stdin "https://${IMAGE%%/*}" >/dev/null ||
  log "docker login to ${IMAGE%%/*} failed; trying the pull anyway"
for ((try = 1; ; try++)); do
  docker pull "$IMAGE" && break
  ((try >= PULL_TRIES)) && fatal "docker pull $IMAGE failed $PULL_TRIES times"
  sleep $((POLL_S * try))
done

flags=$(json_lines "$flags") || fatal "trainstack-docker-flags is not a JSON list of strings: $flags"
if [[ -n $flags ]]; then mapfile -t FLAGS <<<"$flags"; fi

waiting_since=$SECONDS
until nvidia-smi >/dev/null 2>&1; do
  ((SECONDS - waiting_since >= DRIVER_WAIT_S)) && fatal "GPU driver not ready after ${DRIVER_WAIT_S}s (nvidia-smi fails)"
  sleep "$POLL_S"
done

docker rm -f "$NAME" >/dev/null 2>&1 # a container left by an earlier boot of this disk
# --stop-timeout: if docker itself stops the container at shutdown (its service may stop
# alongside the shutdown script), the trainer still gets the Spot notice to checkpoint.
docker run --rm --name "$NAME" --init --stop-timeout 25 "${GPU_FLAGS[@]}" --shm-size "$SHM" --network host \
  --volume "$STATE_DIR:/run/trainstack:ro" "${FLAGS[@]}" \
  -e PYTHONUNBUFFERED=1 --entrypoint python "$IMAGE" -m trainer.launchers.vm run
code=$?
case $code in
0) log "the run ended; the agent has handled it" ;;
143) log "stopped by the shutdown script (preemption?): the group recreates this VM and the run resumes" ;;
# 137 (killed) and 125 (docker client failed) are interruptions when the VM is going away: fatal checks.
*) fatal "container $NAME exited with code $code (see the run's status.json and log.txt)" ;;
esac
