"""Power arithmetic against worked values: single- and three-phase VA, NEC 210.20(A)'s 80 %
continuous-load rule (datacentermd.com works 208 V x 30 A x sqrt(3) x 0.8 = 8,646 VA), 2N on
one feed, BTU/h = W x 3.412, and airflow against NVIDIA's DGX H100 and B200 user guides."""

from __future__ import annotations

import math

import pytest

from provisioner import power
from provisioner.inventory import load
from provisioner.inventory.models import Feed, Rack
from tests.conftest import EXAMPLE, VSCALER


def feed(phase: str, v: float, a: float, derating: float = 0.8, name: str = "A") -> Feed:
    return Feed(name=name, phase=phase, voltage_v=v, breaker_a=a, derating=derating)


@pytest.mark.parametrize(
    ("phase", "v", "a", "capacity", "usable"),
    [
        ("single", 208, 30, 6240, 4992),
        ("single", 230, 16, 3680, 2944),
        ("single", 230, 32, 7360, 5888),
        ("three", 208, 30, 10808, 8646),
        ("three", 208, 60, 21616, 17293),
        ("three", 400, 32, 22170, 17736),
        ("three", 415, 32, 23002, 18401),
        ("three", 400, 63, 43648, 34918),
        ("three", 415, 63, 45284, 36228),
    ],
)
def test_feed_capacity_worked_values(phase, v, a, capacity, usable):
    f = feed(phase, v, a)
    assert power.feed_capacity_va(f) == pytest.approx(capacity, abs=1)
    assert power.feed_usable_va(f) == pytest.approx(usable, abs=1)


def test_three_phase_uses_sqrt3():
    # 208 V x 30 A x sqrt(3) x 0.8 = 8,646 VA (datacentermd.com worked example)
    expected = 208 * 30 * math.sqrt(3) * 0.8
    assert power.feed_usable_va(feed("three", 208, 30)) == pytest.approx(expected)
    assert round(power.feed_usable_va(feed("three", 208, 30))) == 8646


def test_2n_usable_is_one_feed_never_the_sum():
    a, b = feed("three", 208, 30, name="A"), feed("three", 208, 30, name="B")
    rack = Rack(name="r", feeds=(a, b), redundancy="2N", cooling_kw=20)
    assert power.rack_usable_va(rack) == pytest.approx(power.feed_usable_va(a))
    assert round(power.rack_usable_va(rack)) == 8646  # not 17,292


def test_2n_with_unequal_feeds_uses_the_weaker():
    rack = Rack(name="r", redundancy="2N", cooling_kw=20,
                feeds=(feed("three", 415, 63, name="A"), feed("three", 208, 30, name="B")))
    assert round(power.rack_usable_va(rack)) == 8646


@pytest.mark.parametrize(
    ("watts", "btu"),
    [(3500, 11942.0), (6500, 22178.0), (10000, 34120.0), (10200, 34802.4), (14300, 48791.6)],
)
def test_heat_btu_per_hour(watts, btu):
    assert power.btu_per_hour(watts) == pytest.approx(btu, abs=0.05)


def test_airflow_matches_nvidia_published_figures():
    # DGX H100: 10.2 kW at 1,105 CFM implies dT ~= 29.2 F; DGX B200: 14.3 kW at 1,550 CFM.
    assert power.airflow_cfm(10200, 29.2) == pytest.approx(1105, rel=0.01)
    assert power.airflow_cfm(14300, 29.2) == pytest.approx(1550, rel=0.01)
    assert pytest.approx(3.145, abs=0.001) == power.CFM_PER_W_PER_F


def test_rack_over_power_names_feed_and_amount():
    loaded = load(EXAMPLE)
    rack = loaded.site.racks[0].model_copy(update={
        "feeds": (feed("three", 208, 30, name="A"), feed("three", 208, 30, name="B"))})
    rb = power.rack_budget(rack, loaded.site.placements, loaded.catalog)
    assert not rb.ok
    over = [f for f in rb.failures if f.check == "power"]
    assert [f.subject for f in over] == ["feed A", "feed B"]
    expected_over = rb.load_w / rack.power_factor - 208 * 30 * math.sqrt(3) * 0.8
    assert over[0].over_by == pytest.approx(expected_over)
    assert "feed A" in over[0].message and f"{expected_over:,.0f} VA" in over[0].message


def test_cooling_and_space_failures():
    loaded = load(EXAMPLE)
    rack = loaded.site.racks[0].model_copy(update={"cooling_kw": 10.0, "height_u": 20})
    rb = power.rack_budget(rack, loaded.site.placements, loaded.catalog)
    checks = {f.check: f for f in rb.failures}
    assert checks["cooling"].over_by == pytest.approx(rb.load_w - 10_000)
    assert checks["space"].over_by == rb.used_u - 20
    assert rb.free_u == 20 - rb.used_u < 0


def test_typical_basis_is_lower_and_flags_estimates():
    loaded = load(VSCALER)
    name = power.budget(loaded.site, loaded.catalog, "nameplate")
    typ = power.budget(loaded.site, loaded.catalog, "typical")
    assert typ.total_load_w < name.total_load_w
    # DGX-2 typical is the 7.8 kW the vScaler paper measured, not an estimate.
    assert "dgx-2" not in typ.racks[0].estimated_blocks
    assert "stor-xl-4u" in name.racks[0].estimated_blocks


def test_vscaler_rack_reproduces_40u_and_justified_power():
    loaded = load(VSCALER)
    report = power.budget(loaded.site, loaded.catalog)
    rack = report.racks[0]
    assert rack.used_u == 40
    by_block = {p.block: loaded.catalog[p.block] for p in loaded.site.placements}
    expected = sum(by_block[p.block].max_power_w for p in loaded.site.placements)
    assert rack.load_w == pytest.approx(expected)
    # Paper's 24 kW = everything but the DGX-2s at nameplate + 2 x 7.8 kW measured DGX-2.
    dgx2 = by_block["dgx-2"]
    paper_style = expected - 2 * dgx2.max_power_w + 2 * dgx2.typical_power_w
    assert paper_style == pytest.approx(24_000, rel=0.01)
    assert rack.ok
