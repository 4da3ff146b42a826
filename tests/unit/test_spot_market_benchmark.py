"""benchmarks/spot_market.py: one drawn market, expressed for the local target and for the simulated Google Cloud."""

from __future__ import annotations

from benchmarks.spot_market import GCP_ZONES, ZONES, draw_market, env_overlay, gcp_overrides, undisturbed_market
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
