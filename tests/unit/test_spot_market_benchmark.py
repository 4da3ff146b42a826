"""benchmarks/spot_market.py: one drawn market, expressed for the local target and for the simulated Google Cloud."""

from __future__ import annotations

from benchmarks.spot_market import (
    GCP_ZONES,
    ZONES,
    draw_market,
    env_overlay,
    fired_before,
    gcp_overrides,
    has_capacity_between,
    sim_preemptions,
    undisturbed_market,
)
from stacks.config.market import SpotMarketSettings
from stacks.targets.gcp.sim.scenario import DEFAULT_SCENARIO, load_scenario, region_of


def test_the_simulated_cloud_gets_the_drawn_market_zone_for_zone_and_none_of_the_shipped_scenarios_own():
    market = draw_market(1.0, seed=7, speedup=120)
    assert market["preemptions"] and any(z["outages"] for z in market["zones"].values())
    local = SpotMarketSettings.model_validate(market)
    scenario = load_scenario(DEFAULT_SCENARIO, gcp_overrides(market))
    sim = scenario.market()

    assert sim.speedup == local.speedup == 120
    for zone in ZONES:
        assert sim.zones[GCP_ZONES[zone]].outages == local.zones[zone].outages, zone
    assert [(p.zone, p.at_s, p.outage_s) for p in sim.preemptions] == [
        (GCP_ZONES[p.zone], p.at_s, p.outage_s) for p in local.preemptions
    ]
    # the shipped scenario's dry europe-west4-a and its classifier-stage preemption are replaced, not merged
    quiet = load_scenario(DEFAULT_SCENARIO, gcp_overrides(undisturbed_market(120))).market()
    assert quiet.preemptions == [] and all(quiet.zones[z].outages == [] for z in GCP_ZONES.values())


def test_the_gcp_zones_are_tried_in_the_markets_order_two_in_one_region_the_last_in_another():
    overlay = env_overlay("gcp-sim", undisturbed_market(60), {"creation_error_minutes": 0.1})
    gcp = overlay["gcp"]
    order = [*gcp["zones"], *gcp["fallback_zones"]]
    assert order == [GCP_ZONES[z] for z in ZONES]
    assert region_of(order[0]) == region_of(order[1]) != region_of(order[2])
    scenario = load_scenario(DEFAULT_SCENARIO, gcp["simulated"]["overrides"])
    assert all("nvidia-l4" in scenario.zones[z].accelerators for z in order)  # gcp-sim's GPU, offered in each
    assert overlay["extends"] == "gcp-sim" and overlay["defaults"] == {"creation_error_minutes": 0.1}


def test_each_preemption_train_saw_is_timed_from_the_last_the_market_fired_in_its_zone_before_it():
    said = [
        (100.0, "simulated VM bench-train-fr-0003 in europe-west4-a: running the VM agent (boot 1, log x)"),
        (130.2, "simulated VM bench-train-fr-0003: preempted, SIGTERM sent"),
        (133.0, "simulated VM bench-train-fr-0003: preempted, SIGTERM sent"),  # again, while it stops
        (140.0, "simulated VM bench-train-fr-0007 in europe-west4-b: running the VM agent (boot 1, log y)"),
        (150.0, "simulated VM bench-train-fr-0007: preempted, SIGTERM sent"),
        (151.0, "simulated VM bench-train-fr-0009: preempted, SIGTERM sent"),  # never seen starting: no zone
    ]
    fires = sim_preemptions(said)
    assert fires == [(130.2, "europe-west4-a"), (133.0, "europe-west4-a"), (150.0, "europe-west4-b")]
    assert fired_before(fires, "europe-west4-a", 131.0) == 130.2  # stamped 131 s: seen 0.8 s after it fired
    assert fired_before(fires, "europe-west4-a", 134.0) == 133.0  # a later one: not the first in the zone
    assert fired_before(fires, "europe-west4-b", 150.0) == 150.0  # the journal's whole second, same second
    assert fired_before(fires, "europe-west4-b", 140.0) is None


def test_a_move_is_a_false_recovery_only_when_the_zone_had_capacity_all_the_while_it_was_decided():
    market = {"zones": {"sim-a": {"outages": [{"start_s": 5413, "end_s": 6872}, {"start_s": 9000}]}}}
    assert not has_capacity_between(market, "sim-a", 5400, 5640)  # dry from 5413: the errors were real
    assert has_capacity_between(market, "sim-a", 7000, 8000)
    assert not has_capacity_between(market, "sim-a", 8990, 9100)  # dry for good from 9000
