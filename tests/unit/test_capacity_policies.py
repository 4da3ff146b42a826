"""benchmarks/capacity_policies.py: the policy model around the real Failover, in markets built to be unkind."""

from __future__ import annotations

import random

from benchmarks import capacity_policies as cp


def market(dry=None, preempt=None) -> cp.Market:
    return cp.Market(
        {z: list((dry or {}).get(z, [])) for z in cp.ZONES},
        {z: list((preempt or {}).get(z, [])) for z in cp.ZONES},
        random.Random(1),
    )


FOREVER = (0.0, float("inf"))


def test_every_spot_zone_dry_the_flex_rung_trains_the_run_where_spot_alone_is_stopped_again_and_again():
    dry = {z: [FOREVER] for z in cp.ZONES}
    flex_policy = cp.Policy("ranked + flex", ranked=True, ladder=("spot", "flex_start"))
    flex = cp.one_run(market(dry), flex_policy, 0.0, cp.History())
    assert flex.billed["flex_start"] > cp.WORK_H * 3600 and flex.billed["spot"] == 0 and flex.lost_s == []
    assert flex.stops == 0
    # Spot alone waits capacity_wait_minutes, stops, is resumed, and again, until the horizon's end
    dry_until = {z: [(0.0, 5 * 3600.0)] for z in cp.ZONES}
    spot_only = cp.one_run(market(dry_until), cp.Policy("ranked", ranked=True), 0.0, cp.History())
    assert spot_only.stops >= 2 and spot_only.billed["flex_start"] == 0


def test_a_ranked_run_leaves_the_zone_that_preempted_it_and_the_history_ranks_it_last():
    # sim-a takes the VM back after an hour and is dry for two; sim-b never preempts
    m = market(dry={"sim-a": [(3600.0, 3 * 3600.0)]}, preempt={"sim-a": [3600.0]})
    history = cp.History()
    at_once = cp.one_run(m, cp.Policy("move", ranked=True, move_at_preemption=True), 0.0, history)
    assert history.preemptions == {"sim-a": 1, "sim-b": 0, "sim-c": 0}
    assert history.vm_s["sim-b"] > 0 and at_once.back_s == [cp.MOVE_S + cp.BOOT_S]
    assert history.ranked({}, 0.0)[-1] == "sim-a"
    # as it ships: the group waits in its zone first; the move then skips the blocked zone
    shipped = cp.one_run(m, cp.Policy("ranked", ranked=True), 0.0, cp.History())
    assert shipped.back_s == [cp.CREATION_ERROR_S + cp.MOVE_S + cp.BOOT_S]


def test_the_notice_loses_half_a_batch_where_no_notice_loses_the_work_since_the_last_checkpoint():
    m = market(dry={"sim-a": [(3600.0 + 7 * 60, 3 * 3600.0)]}, preempt={"sim-a": [3600.0 + 7 * 60]})
    on = cp.one_run(m, cp.Policy("in order"), 0.0, cp.History())
    off = cp.one_run(m, cp.Policy("in order", notice=False), 0.0, cp.History())
    trained = 3600.0 + 7 * 60 - cp.BOOT_S
    assert on.lost_s == [cp.BATCH_S / 2]
    assert off.lost_s == [trained % cp.CHECKPOINT_S] and off.lost_s[0] > 60
    assert off.ended > on.ended  # the lost work is trained again
