"""`provision add`: placement within the budgets, allocation, and the inventory write-back
(golden diff on a commented multi-file site)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provisioner import profile
from provisioner.cli import app
from provisioner.discover import add as add_mod
from provisioner.discover import place, writeback
from provisioner.errors import BudgetError, ConfigError, StateError
from provisioner.inventory import checks, load
from provisioner.inventory.findings import Severity
from provisioner.inventory.models import Bmc
from provisioner.lifecycle import Phase
from provisioner.state import StateStore
from tests.conftest import FIXTURES, ROOT, requires_git

SITE = FIXTURES / "sites" / "add_commented"
GOLDEN = ROOT / "tests" / "golden" / "add" / "placements-r02.diff"
BMC = Bmc(protocol="redfish", address="10.20.1.40", credentials="bmc")
runner = CliRunner()


@pytest.fixture
def site(tmp_path: Path) -> Path:
    dest = tmp_path / "grow"
    shutil.copytree(SITE, dest)
    return dest


def _discovered(site: Path, ident: str, block: str | None) -> StateStore:
    """A node as `provision discover` records it (its event is what `add` reads)."""
    store = StateStore(profile.for_site(load(site)).state_path)
    run = store.start_run("discover")
    store.enroll([ident], run, phase=Phase.DISCOVERED)
    store.record(ident, "discovery", {
        "bmc": {"protocol": "redfish", "address": "10.20.1.40", "port": 443,
                "scheme": "https"},
        "lease_mac": None, "error": None,
        "facts": {"vendor": "NVIDIA", "model": "DGXH100", "serial": "1234",
                  "gpus": [["H100", 8]], "nvswitch_count": 4,
                  "macs": ["7c:c2:55:00:00:40"], "mgmt_mac": "7c:c2:55:00:00:40",
                  "mgmt_mac_how": "the only NIC among the BMC's network boot options"},
        "block": block, "confidence": 0.93 if block else None,
        "reasons": ["match: 8x H100"] if block else ["differs: no block has 3x L4"]}, run)
    store.end_run(run, "ok")
    return store


def test_full_rack_is_skipped_for_the_next_with_room() -> None:
    loaded = load(SITE)
    p = place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC)
    assert (p.rack, p.u) == ("r02", 9)  # r01's feeds cannot carry a fourth DGX
    r01 = next(f for f in p.checked if f.rack == "r01")
    assert not r01.ok and "exceeds usable 36,228 VA" in r01.failures[0]
    assert r01.load_w_after == 3 * 10_200 + 1_400 + 10_200
    assert p.hostname == "gpu-a05"  # the block's pattern, next number
    assert p.addresses == {"mgmt": "10.20.0.15", "roce": "10.20.2.15"}
    # r02's second RoCE node: port 2 of its leaf (the rule counts nodes per rack)
    assert p.links == (("roce", "leaf-b", "swp2s0"),)


def test_overload_is_refused_with_the_numbers_and_a_rack_with_room() -> None:
    loaded = load(SITE)
    with pytest.raises(BudgetError) as err:
        place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC, rack="r01")
    assert err.value.exit_code == 4
    assert "load 42,200 W = 44,421 VA at PF 0.95 exceeds usable 36,228 VA by 8,193 VA" \
        in err.value.message
    assert err.value.hint is not None and "--rack r02" in err.value.hint
    with pytest.raises(BudgetError, match="U1-U8 is not free"):
        place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC, rack="r02", u=1)


def test_no_rack_with_room_says_so() -> None:
    loaded = load(SITE)
    big = loaded.site.model_copy(update={"racks": loaded.site.racks[:1]})
    with pytest.raises(BudgetError) as err:
        place.propose(big, loaded.catalog, "dgx-h100", BMC)
    assert err.value.hint == "add a rack, or free power, cooling or rack units"


def test_addresses_skip_used_and_gateway() -> None:
    loaded = load(SITE)
    got = place.addresses(loaded.site, loaded.catalog, loaded.catalog["sn5600"])
    assert got == {"mgmt": "10.20.0.4"}  # .1 gateway, .2 and .3 the leaves
    assert place.hostname(loaded.site, loaded.catalog, loaded.catalog["hci-2u4n"]) \
        == "hci01"  # no node of that kind: the kind's prefix


def test_write_back_golden_diff_keeps_every_line(site: Path) -> None:
    loaded = load(site)
    p = place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC,
                      mgmt_mac="7c:c2:55:00:00:40")
    change = writeback.plan_change(loaded, p)
    assert change.path.name == "placements-r02.yaml"
    assert change.diff == GOLDEN.read_text()
    before = {f: (site / f).read_text() for f in ("site.yaml", "racks.yaml",
                                                  "placements-r01.yaml")}
    writeback.apply(change)
    for name, text in before.items():
        assert (site / name).read_text() == text  # the other files untouched
    after = (site / "placements-r02.yaml").read_text().splitlines()
    old = change.before.splitlines()
    it = iter(after)
    assert all(line in it for line in old)  # every old line, in order (a pure addition)
    grown = load(site)
    node = next(n for pl in grown.site.placements for n in pl.nodes
                if n.hostname == "gpu-a05")
    assert str(node.addresses["roce"]) == "10.20.2.15" and node.macs["mgmt"] \
        == "7c:c2:55:00:00:40"
    assert not [f for f in checks.check(grown) if f.severity is Severity.ERROR]
    # YAML 1.1 readers (PyYAML) read the quoted MAC as the same string
    doc = yaml.safe_load((site / "placements-r02.yaml").read_text())
    assert doc["placements"][2]["nodes"][0]["macs"]["mgmt"] == "7c:c2:55:00:00:40"


@requires_git
def test_patch_applies_with_git(site: Path, tmp_path: Path) -> None:
    loaded = load(site)
    p = place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC)
    change = writeback.plan_change(loaded, p)
    patch = tmp_path / "add.patch"
    writeback.write_patch(change, patch)
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=site, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=site, check=True)
    assert (site / "placements-r02.yaml").read_text() == change.after


def test_apply_enrolls_the_host_in_place_of_the_discovered_node(site: Path) -> None:
    store = _discovered(site, "disc-1234", "dgx-h100")
    _discovered(site, "disc-other", "dgx-h100")  # another one, not added: stays discovered
    loaded = load(site)
    source = add_mod.from_discovered(store, "disc-1234", "bmc")
    result = add_mod.add(loaded, store, source, apply=True)
    assert result.applied and result.proposal.hostname == "gpu-a05"
    # the discovered row became the host: `status` shows no stale discovered node for it
    assert {n.hostname: n.phase for n in store.nodes()} == {
        "gpu-a05": Phase.ENROLLED, "disc-other": Phase.DISCOVERED}
    assert store.check_consistency() == []
    moved = [e for e in store.events("gpu-a05") if e.kind == "transition"]
    assert [(e.from_phase, e.to_phase) for e in moved] == [("discovered", "enrolled")]
    assert moved[0].detail["discovered_as"] == "disc-1234"
    # the id's history stays in the event log, the last event naming the host
    history = store.events("disc-1234")
    assert [e.kind for e in history] == ["discovered", "discovery", "added"]
    assert history[-1].detail == {"hostname": "gpu-a05"}
    with pytest.raises(ConfigError, match="added already as gpu-a05"):
        add_mod.from_discovered(store, "disc-1234", "bmc")


def test_adopt_refuses_a_taken_name_and_a_node_not_discovered(site: Path) -> None:
    store = _discovered(site, "disc-1234", "dgx-h100")
    store.enroll(["gpu-a05"])
    with pytest.raises(StateError, match="gpu-a05 is in the state store already"):
        store.adopt("disc-1234", "gpu-a05")
    with pytest.raises(StateError, match="gpu-a05 is not a discovered node"):
        store.adopt("gpu-a05", "gpu-a06")
    assert store.node("disc-1234").phase is Phase.DISCOVERED  # nothing half-done
    assert [e.kind for e in store.events("disc-1234")] == ["discovered", "discovery"]


def test_cli_unknown_shape_is_not_guessed(site: Path) -> None:
    _discovered(site, "disc-odd", None)
    res = runner.invoke(app, ["add", str(site), "--discovered", "disc-odd"])
    assert res.exit_code == 2
    assert "matches no catalog block" in res.output and "no block has 3x L4" in res.output
    assert not list(site.glob("*.patch"))


def test_cli_overload_exit_4_and_review_patch(site: Path, tmp_path: Path) -> None:
    _discovered(site, "disc-1234", "dgx-h100")
    res = runner.invoke(app, ["add", str(site), "--discovered", "disc-1234", "--rack", "r01"])
    assert res.exit_code == 4, res.output
    assert "8,193 VA" in res.output and "--rack r02" in res.output
    patch = tmp_path / "review.patch"
    before = (site / "placements-r02.yaml").read_text()
    res = runner.invoke(app, ["add", str(site), "--discovered", "disc-1234",
                              "--patch", str(patch)])
    assert res.exit_code == 0, res.output
    assert patch.read_text() == GOLDEN.read_text()  # the MAC: the NIC the BMC PXE-boots
    assert (site / "placements-r02.yaml").read_text() == before  # nothing written


def test_insert_between_racks_keeps_the_next_rack_s_comment(tmp_path: Path) -> None:
    site = tmp_path / "one"
    shutil.copytree(SITE, site)
    r01 = (site / "placements-r01.yaml").read_text()
    r02 = (site / "placements-r02.yaml").read_text().replace("placements:\n", "")
    (site / "placements-r01.yaml").write_text(r01 + r02)
    (site / "placements-r02.yaml").unlink()
    loaded = load(site)
    p = place.propose(loaded.site, loaded.catalog, "storage-flash-2u", BMC, rack="r01")
    change = writeback.plan_change(loaded, p)
    after = change.after.splitlines()
    new_at = after.index("  - rack: r01", after.index("      - hostname: leaf-a"))
    # right after r01's last chassis, before the comment that opens r02's
    assert after[new_at + 7] == "  # --- rack r02 ---"
    assert [ln for ln in change.diff.splitlines()[2:] if ln.startswith("-")] == []
    assert p.hostname == "stor01" and p.u == 25


def test_an_imex_node_names_its_domain_peers_to_refresh(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Every node of an NVLink domain lists all of its nodes in nodes_config.cfg, and `add`
    configures the new node alone: the report names the domain's other nodes (its rack's
    IMEX trays, not another rack's, not a CPU node), with the `up --limit` that refreshes
    them. A block without IMEX names none."""
    from provisioner import results
    from provisioner.console import Console
    from provisioner.console.discover import add_summary

    text = (FIXTURES / "sites" / "gb200.yaml").read_text()
    (tmp_path / "site.yaml").write_text(text.replace(  # installed nodes need a login
        "site: {name: gb200-site}", "site:\n  name: gb200-site\n  ssh: {authorized_keys: "
        "['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc "
        "admin@example']}"))
    loaded = load(tmp_path / "site.yaml")
    store = StateStore(tmp_path / "state.db")
    tray = add_mod.Source(id=None, bmc=Bmc(protocol="redfish", address="10.2.0.40",
                                           credentials="bmc"),
                          block="gb200-nvl72-tray", confidence=None, reasons=(),
                          mgmt_mac="7c:c2:55:00:00:41", serial=None)
    result = add_mod.add(loaded, store, tray)
    assert (result.proposal.hostname, result.proposal.rack) == ("gb04", "r01")
    assert result.imex_peers == ("gb01", "gb02")
    report = results.add_report("gb200-site", result, block_named=True)
    assert report.imex_peers_to_refresh == ["gb01", "gb02"]
    add_summary(Console(no_color=True), report)
    assert "`provision up --limit gb01,gb02`" in capsys.readouterr().err
    cpu = dataclasses.replace(tray, block="hci-2u4n")
    assert add_mod.add(loaded, store, cpu).imex_peers == ()


def _discovered_without_mac(site: Path, ident: str) -> StateStore:
    """A node whose BMC names no network-boot NIC, found by no lease."""
    store = _discovered(site, ident, "dgx-h100")
    run = store.start_run("discover")
    ev = store.events(ident, kind="discovery")[-1].detail
    facts = {**ev["facts"], "mgmt_mac": None,
             "mgmt_mac_how": "the BMC names no network-boot NIC"}
    store.record(ident, "discovery", {**ev, "facts": facts}, run)
    store.end_run(run, "ok")
    return store


def test_cli_mac_names_the_pxe_nic_the_bmc_cannot(site: Path) -> None:
    """No MAC from the BMC or a lease: refused, with --mac in the hint; --mac then names it
    (checked and written as the inventory writes a MAC, recorded with how it is known); a
    typo is refused before anything is probed, and a MAC other than the BMC's is refused."""
    store = _discovered_without_mac(site, "disc-1234")
    res = runner.invoke(app, ["add", str(site), "--discovered", "disc-1234"])
    assert res.exit_code == 2 and "--mac MAC" in " ".join(res.output.split()), res.output
    bad = runner.invoke(app, ["add", str(site), "--discovered", "disc-1234", "--mac",
                              "7c:c2:55:00:00"])
    assert bad.exit_code == 2 and "not a MAC address" in bad.output, bad.output
    before = (site / "placements-r02.yaml").read_text()
    res = runner.invoke(app, ["add", str(site), "--discovered", "disc-1234", "--mac",
                              "7C-C2-55-00-00-41", "--yes", "--no-up", "--json"])
    assert res.exit_code == 0, res.output
    grown = load(site)
    node = next(n for p in grown.site.placements for n in p.nodes if n.hostname == "gpu-a05")
    assert node.macs == {"mgmt": "7c:c2:55:00:00:41"}
    assert (site / "placements-r02.yaml").read_text() != before
    enrolled = [e for e in store.events("gpu-a05") if e.kind == "transition"][-1].detail
    assert enrolled["mgmt_mac"] == "7c:c2:55:00:00:41"
    assert enrolled["mgmt_mac_how"] == add_mod.NAMED_BY_OPERATOR
    # the BMC names one: the same one is taken as the BMC's; another is refused
    other = _discovered(site, "disc-5678", "dgx-h100")
    source = add_mod.from_discovered(other, "disc-5678", "bmc")
    assert add_mod.named_mac(source, "7c:c2:55:00:00:40") == source
    with pytest.raises(ConfigError, match="not the management NIC discovery knows: "
                       "7c:c2:55:00:00:40"):
        add_mod.named_mac(source, "7c:c2:55:00:00:99")


def test_a_rack_whose_shared_circuit_would_go_over_is_not_chosen(tmp_path: Path) -> None:
    """r03 is empty and its own feed carries a DGX H100 easily, but its feed hangs off
    pdu1-cb1, which r01 already loads to 77.5 %: with the DGX the circuit is at 141 %, so
    the node goes to r04 (no shared circuit), and --rack r03 is refused with the numbers
    `validate` would print (test_power_circuits' site: 16,000 VA usable per circuit)."""
    from provisioner.inventory.findings import errors
    from tests.unit.test_power_circuits import RACK, write

    racks = "racks:\n" + "".join(
        RACK.format(name=n, feed="A", circuit=f", circuit: {c}" if c else "")
        for n, c in (("r01", "pdu1-cb1"), ("r02", "pdu2-cb1"), ("r03", "pdu1-cb1"),
                     ("r04", None)))
    loaded = load(write(tmp_path, racks))
    assert not errors(checks.check(loaded))  # the site as it is: every circuit within
    p = place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC)
    assert p.rack == "r04", [(f.rack, f.failures) for f in p.checked]
    r03 = next(f for f in p.checked if f.rack == "r03")
    said = ("circuit pdu1-cb1: worst-case load r01 (feed A) 12,400 VA + r03 (feed A) "
            "10,200 VA = 22,600 VA is 141% of its usable 16,000 VA")
    assert r03.u == 1 and any(m.startswith(said) for m in r03.failures), r03.failures
    assert len(r03.failures) == 1  # its own feed, cooling and space are fine
    with pytest.raises(BudgetError) as err:
        place.propose(loaded.site, loaded.catalog, "dgx-h100", BMC, rack="r03")
    assert said in err.value.message and "--rack r04" in (err.value.hint or "")
