#!/usr/bin/env bash
# trainstack trainer VM shutdown script: Spot preemption (or any stop/delete) gives ~30 s.
#
# First a flag that says this VM is going away (startup.sh and the agent then count any
# trainer exit as an interruption, never as a failure), then SIGTERM the trainer container
# (its agent forwards it to the trainer, which saves a checkpoint and exits 143), and wait
# for it, never longer than the budget, so the rest of the shutdown still fits in the
# notice. The container is gone already after a normal end.
set -uo pipefail

NAME=trainstack-trainer
WAIT_S=${TRAINSTACK_STOP_WAIT_S:-25}
STATE_DIR=${TRAINSTACK_STATE_DIR:-/run/trainstack}

log() { echo "$(date -u +%FT%TZ) trainstack shutdown: $*"; }

if ! { mkdir -p "$STATE_DIR" && touch "$STATE_DIR/shutting-down"; }; then log "could not write $STATE_DIR/shutting-down"; fi
log "stopping $NAME (at most ${WAIT_S}s)"
# One bound for both calls: a hung Docker daemon must not hold the shutdown either.
timeout --kill-after=2 "$WAIT_S" bash -c "docker kill --signal TERM $NAME >/dev/null && docker wait $NAME"
log "done (code $?)"
