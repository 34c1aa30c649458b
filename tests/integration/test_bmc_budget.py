"""`bmc on` and `bmc cycle` pass `up`'s rack budget gate, against the lab's real ipmi_sim
BMCs: a node in an over-budget rack never gets a power request, the others are powered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from provisioner import lab as lab_mod
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.workflows.steps.bmc import blocked_racks
from tests.conftest import FIXTURES
from tests.integration.conftest import provision, requires_ipmi_sim

pytestmark = [pytest.mark.integration, requires_ipmi_sim]


@pytest.fixture
def two_rack_lab(tmp_path: Path):
    """ipmi3 with n03 moved to a rack r02 whose 1 A feed cannot carry it; lab running."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURES / "sites" / "ipmi3", site,
                    ignore=shutil.ignore_patterns(".provision"))
    path = next(site.glob("*.yaml"))
    doc = yaml.safe_load(path.read_text())
    chassis = doc["placements"][0]
    n03 = chassis["nodes"].pop()
    assert n03["hostname"] == "n03"
    doc["racks"].append({"name": "r02", "height_u": 42, "cooling_kw": 10, "feeds": [
        {"name": "A", "phase": "single", "voltage_v": 230, "breaker_a": 1}]})
    doc["placements"].append({"rack": "r02", "u": 1, "block": chassis["block"],
                              "nodes": [n03]})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load(site)
    lab_mod.up(loaded)
    try:
        yield site
    finally:
        lab_mod.down(loaded)


def history(site: Path, host: str) -> list[str]:
    state = lab_mod.status(load(site))
    assert state is not None
    f = Path(state.endpoints[host]["chassis_dir"]) / "history"
    return [line.split(" ", 1)[1] for line in f.read_text().splitlines()] if f.exists() else []


def test_bmc_on_and_cycle_refuse_the_over_budget_rack_and_power_the_rest(two_rack_lab):
    site = two_rack_lab
    why = blocked_racks(load(site))
    assert set(why) == {"r02"}  # the rule `up` uses: only r02 is over budget
    for operation in ("on", "cycle"):
        proc = provision("bmc", operation, str(site), "--json", "--timeout", "60")
        assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
        nodes = {n["node"]: n for n in json.loads(proc.stdout)["nodes"]}
        assert list(nodes) == ["n01", "n02", "n03"]  # inventory order, refused included
        assert nodes["n01"]["ok"] and nodes["n02"]["ok"], nodes
        assert nodes["n01"]["result"] == "on" and nodes["n02"]["result"] == "on"
        assert not nodes["n03"]["ok"] and nodes["n03"]["error_kind"] == "BudgetError"
        assert nodes["n03"]["error"] == (f"not powered on: rack r02 is over budget "
                                         f"({why['r02']})")
    assert "set power 1" not in history(site, "n03")  # never asked (it was off)
    assert "set power 1" in history(site, "n01") and "set power 1" in history(site, "n02")
    # power off is not gated: every node, n03 included, is asked
    off = provision("bmc", "off", str(site), "--json", "--timeout", "60")
    assert off.returncode == 0, off.stdout[-2000:] + off.stderr[-2000:]
    assert {n["node"]: n["result"] for n in json.loads(off.stdout)["nodes"]} == dict.fromkeys(
        ("n01", "n02", "n03"), "off")
    assert "set power 0" in history(site, "n01")
    # a human sees the rack's budget message in the table
    text = provision("bmc", "on", str(site), "--limit", "n03")
    assert text.returncode == 4 and "rack r02 is over budget" in " ".join(text.stdout.split())
