"""Shared upstream circuits: racks whose feeds hang off one breaker or busway add up on it.

Every site here is written as YAML files and read by the real loader; the CLI runs through
typer's CliRunner. Each rack draws 12,400 W (a DGX H100 at 10,200 W plus a 2,200 W 2U4N
block) at power factor 1.0, i.e. 12,400 VA; the shared circuit is single-phase
200 V x 100 A x 0.8 = 16,000 VA usable, so one rack is 77.5 % of it and two are 155 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import power
from provisioner.cli import app
from provisioner.inventory import check, load
from provisioner.inventory.findings import Finding, Severity, errors, warnings
from provisioner.inventory.schema import site_schema
from provisioner.workflows.steps.bmc import blocked_racks

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc a@example"
SITE = f"site: {{name: circ, ssh: {{authorized_keys: ['{KEY}']}}}}\n" + """\
credentials:
  bmc: {username: admin, password: {env: BMC_PW}}
networks:
  - {name: mgmt, kind: management, cidr: 10.1.0.0/24}
  - {name: oob, kind: oob, cidr: 10.2.0.0/24}
software:
  nvidia_driver: {branch: "570", version: "570.124.06", kernel_modules: auto}
  cuda: "12.8"
  fabric_manager: {enabled: auto}
  kubernetes: {version: "1.35.8"}
placements:
  - rack: r01
    u: 1
    block: dgx-h100
    nodes:
      - hostname: gpu01
        bmc: {protocol: redfish, address: 10.2.0.11, credentials: bmc}
        addresses: {mgmt: 10.1.0.11}
        macs: {mgmt: "52:54:00:00:00:11"}
  - rack: r01
    u: 20
    block: hci-2u4n
    nodes:
      - hostname: cp01
        roles: [control-plane]
        bmc: {protocol: ipmi, address: 10.2.0.21, credentials: bmc}
        addresses: {mgmt: 10.1.0.21}
        macs: {mgmt: "52:54:00:00:00:21"}
  - rack: r02
    u: 1
    block: dgx-h100
    nodes:
      - hostname: gpu02
        bmc: {protocol: redfish, address: 10.2.0.12, credentials: bmc}
        addresses: {mgmt: 10.1.0.12}
        macs: {mgmt: "52:54:00:00:00:12"}
  - rack: r02
    u: 20
    block: compute-2u4n
    nodes:
      - hostname: cn01
        bmc: {protocol: ipmi, address: 10.2.0.22, credentials: bmc}
        addresses: {mgmt: 10.1.0.22}
        macs: {mgmt: "52:54:00:00:00:22"}
"""

CIRCUITS = """\
circuits:
  - name: pdu1-cb1
    description: floor PDU 1, breaker 1
    phase: single
    voltage_v: 200
    breaker_a: 100
  - {name: pdu2-cb1, phase: single, voltage_v: 200, breaker_a: 100}
"""

RACK = """\
  - name: {name}
    power_factor: 1.0
    cooling_kw: 40
    feeds:
      - {{name: {feed}, phase: three, voltage_v: 400, breaker_a: 32{circuit}}}
"""

RACK_2N = """\
  - name: {name}
    power_factor: 1.0
    cooling_kw: 40
    redundancy: 2N
    feeds:
      - {{name: A, phase: three, voltage_v: 400, breaker_a: 32, circuit: {a}}}
      - {{name: B, phase: three, voltage_v: 400, breaker_a: 32, circuit: {b}}}
"""


def _on(circuit: str | None) -> str:
    return f", circuit: {circuit}" if circuit else ""


def single_racks(c1: str | None, c2: str | None, feed: str = "A") -> str:
    return "racks:\n" + "".join(RACK.format(name=n, feed=feed, circuit=_on(c))
                                for n, c in (("r01", c1), ("r02", c2)))


def write(tmp_path: Path, racks: str, circuits: str = CIRCUITS) -> Path:
    """A split site: the circuits and the racks in files of their own, as a site grows."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "site.yaml").write_text(SITE)
    (site / "circuits.yaml").write_text(circuits)
    (site / "racks.yaml").write_text(racks)
    return site


def line_of(path: Path, text: str, nth: int = 1) -> int:
    """1-based line of the nth line containing text (found here, not by the tool)."""
    hits = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln]
    return hits[nth - 1]


def findings(site: Path) -> list[Finding]:
    return check(load(site))


def only(found: list[Finding], code: str) -> Finding:
    match = [f for f in found if f.code == code]
    assert len(match) == 1, [f.format() for f in found]
    return match[0]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


# ---------------------------------------------------------------- the case


def test_two_racks_at_78_percent_of_one_circuit_are_an_error_at_155_percent(tmp_path):
    site = write(tmp_path, single_racks("pdu1-cb1", "pdu1-cb1"))
    report = power.budget(load(site).site, load(site).catalog)
    assert all(r.ok for r in report.racks)  # each rack's own feed is fine (70 %)
    shared = next(c for c in report.circuits if c.name == "pdu1-cb1")
    assert [ld.load_va / shared.usable_va for ld in shared.loads] == pytest.approx([.775, .775])
    assert shared.utilization == pytest.approx(1.55)
    assert not shared.ok and not report.ok

    f = only(errors(findings(site)), "circuit-over-budget")
    assert f.category.value == "budget"
    assert "circuit pdu1-cb1" in f.message and "155%" in f.message
    assert "r01" in f.message and "r02" in f.message
    assert f.location is not None
    assert Path(f.location.file).name == "circuits.yaml"
    assert f.location.line == line_of(site / "circuits.yaml", "name: pdu1-cb1")
    assert f.location.key_path == "circuits[0]"
    racks_file = site / "racks.yaml"
    for nth in (1, 2):
        assert f"racks.yaml:{line_of(racks_file, 'circuit: pdu1-cb1', nth)}" in f.message


def test_the_cli_exits_4_and_shows_the_circuit(tmp_path):
    site = write(tmp_path, single_racks("pdu1-cb1", "pdu1-cb1"))
    code, out = run("validate", str(site))
    assert code == 4, out
    assert f"circuits.yaml:{line_of(site / 'circuits.yaml', 'name: pdu1-cb1')}:" in out
    code, out = run("power", str(site))
    assert code == 4, out
    circuit_row = next(ln for ln in out.splitlines() if "pdu1-cb1" in ln and "OVER" in ln)
    assert "155%" in circuit_row and "r01 (A)" in circuit_row and "r02 (A)" in circuit_row
    code, out = run("power", str(site), "--json")
    assert code == 4
    doc = json.loads(out)
    assert doc["ok"] is False
    c = {c["name"]: c for c in doc["circuits"]}
    assert c["pdu1-cb1"]["ok"] is False
    assert c["pdu1-cb1"]["utilization"] == pytest.approx(1.55)
    assert c["pdu1-cb1"]["usable_va"] == 16000
    assert c["pdu1-cb1"]["load_va"] == 24800
    assert [ld["rack"] for ld in c["pdu1-cb1"]["loads"]] == ["r01", "r02"]
    assert c["pdu1-cb1"]["failures"][0]["subject"] == "circuit pdu1-cb1"
    assert c["pdu2-cb1"] == c["pdu2-cb1"] | {"ok": True, "load_va": 0, "loads": []}
    assert doc["racks"][0]["power"]["feeds"][0]["circuit"] == "pdu1-cb1"


def test_the_same_racks_on_two_circuits_are_within_budget(tmp_path):
    site = write(tmp_path, single_racks("pdu1-cb1", "pdu2-cb1"))
    found = findings(site)
    assert not errors(found), [f.format() for f in errors(found)]
    assert not [f for f in found if "circuit" in f.code]
    code, out = run("power", str(site), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["ok"] is True
    assert [(c["name"], c["utilization"], c["ok"]) for c in doc["circuits"]] == [
        ("pdu1-cb1", 0.775, True), ("pdu2-cb1", 0.775, True)]


def test_over_circuit_racks_are_never_powered_on(tmp_path):
    blocked = blocked_racks(load(write(tmp_path, single_racks("pdu1-cb1", "pdu1-cb1"))))
    assert set(blocked) == {"r01", "r02"}
    assert all("circuit pdu1-cb1" in why for why in blocked.values())


# ---------------------------------------------------------------- 2N


def test_2n_feeds_each_put_their_whole_rack_on_their_circuit(tmp_path):
    # In normal running each side carries half a rack (6,200 + 6,200 VA = 77.5 % of a
    # circuit); with side B lost, every A feed carries its whole rack: 155 %.
    racks = "racks:\n" + RACK_2N.format(name="r01", a="pdu1-cb1", b="pdu2-cb1") + \
        RACK_2N.format(name="r02", a="pdu1-cb1", b="pdu2-cb1")
    site = write(tmp_path, racks)
    report = power.budget(load(site).site, load(site).catalog)
    assert [(c.name, c.load_va) for c in report.circuits] == [
        ("pdu1-cb1", pytest.approx(24800)), ("pdu2-cb1", pytest.approx(24800))]
    over = [f for f in errors(findings(site)) if f.code == "circuit-over-budget"]
    assert [f.location.key_path for f in over if f.location] == ["circuits[0]", "circuits[1]"]
    assert all("155%" in f.message and "partner fails" in f.message for f in over)


def test_a_2n_pair_on_one_circuit_counts_once_and_is_warned(tmp_path):
    racks = "racks:\n" + RACK_2N.format(name="r01", a="pdu1-cb1", b="pdu1-cb1") + \
        RACK.format(name="r02", feed="A", circuit=_on("pdu2-cb1"))
    site = write(tmp_path, racks)
    report = power.budget(load(site).site, load(site).catalog)
    shared = report.circuits[0]
    assert shared.load_va == pytest.approx(12400)  # the rack draws its load once, not twice
    assert shared.loads[0].feeds == ("A", "B")
    found = findings(site)
    assert not errors(found), [f.format() for f in errors(found)]
    w = only(warnings(found), "2n-shared-circuit")
    assert "r01" in w.message and "pdu1-cb1" in w.message
    assert w.location is not None and w.location.key_path == "racks[0].feeds"


# ---------------------------------------------------------------- names


def test_a_feed_name_repeated_across_racks_without_a_circuit_is_a_warning(tmp_path):
    site = write(tmp_path, single_racks(None, None, feed="pdu1-cb1"), circuits="")
    found = findings(site)
    assert not errors(found), [f.format() for f in errors(found)]
    w = only(found, "feed-name-shared")
    assert w.severity is Severity.WARNING
    assert "pdu1-cb1" in w.message and "r01" in w.message and "r02" in w.message
    assert w.location is not None
    assert Path(w.location.file).name == "racks.yaml"
    assert w.location.line == line_of(site / "racks.yaml", "name: pdu1-cb1")
    assert w.location.key_path == "racks[0].feeds[0].name"
    code, out = run("validate", str(site))
    assert code == 0, out
    assert f"racks.yaml:{w.location.line}:" in out and "warning: feed name 'pdu1-cb1'" in out


def test_a_half_declared_shared_feed_name_is_warned_at_the_bare_feed(tmp_path):
    site = write(tmp_path, single_racks("pdu1-cb1", None, feed="pdu1-cb1"))
    w = only(findings(site), "feed-name-shared")
    assert w.location is not None and w.location.key_path == "racks[1].feeds[0].name"


@pytest.mark.parametrize(("feed", "c1", "c2"), [
    ("A", None, None),                  # A/B side labels: every rack has them
    ("pdu1-cb1", "pdu1-cb1", "pdu1-cb1"),  # declared: summed, nothing to warn
])
def test_no_shared_name_warning_for_side_labels_or_declared_circuits(tmp_path, feed, c1, c2):
    site = write(tmp_path, single_racks(c1, c2, feed=feed))
    assert not [f for f in findings(site) if f.code == "feed-name-shared"]


def test_an_unknown_circuit_is_an_error_with_its_line_and_a_hint(tmp_path):
    site = write(tmp_path, single_racks("pdu1-cb1", "pdu1-cb2"))
    f = only(errors(findings(site)), "unknown-circuit")
    assert f.category.value == "inventory"
    assert "pdu1-cb2" in f.message and "r02" in f.message
    assert f.hint is not None and "pdu1-cb1" in f.hint
    assert f.location is not None
    assert Path(f.location.file).name == "racks.yaml"
    assert f.location.line == line_of(site / "racks.yaml", "circuit: pdu1-cb2")
    assert f.location.key_path == "racks[1].feeds[0].circuit"
    for cmd in ("validate", "power"):
        code, out = run(cmd, str(site))
        assert code == 3, out
        assert f"racks.yaml:{f.location.line}:" in out


def test_an_unknown_circuit_with_none_declared_says_how_to_declare_one(tmp_path):
    site = write(tmp_path, single_racks("busway-3", None), circuits="")
    f = only(errors(findings(site)), "unknown-circuit")
    assert f.hint is not None and "circuits:" in f.hint and "none" in f.hint


def test_a_circuit_defined_twice_is_an_error(tmp_path):
    site = write(tmp_path, single_racks("pdu1-cb1", "pdu2-cb1"),
                 CIRCUITS + "  - {name: pdu1-cb1, phase: three, voltage_v: 400, breaker_a: 63}\n")
    f = only(errors(findings(site)), "duplicate-circuit")
    assert f.location is not None and f.location.key_path == "circuits[2].name"
    assert f"circuits.yaml:{line_of(site / 'circuits.yaml', 'name: pdu1-cb1')}" in f.message


def test_three_phase_circuit_capacity_uses_sqrt3(tmp_path):
    # A 400 V / 250 A three-phase busway: sqrt(3) x 400 x 250 x 0.8 = 138,564 VA usable.
    site = write(tmp_path, single_racks("bus-a", "bus-a"),
                 "circuits:\n  - {name: bus-a, phase: three, voltage_v: 400, breaker_a: 250}\n")
    c = power.budget(load(site).site, load(site).catalog).circuits[0]
    assert round(c.usable_va) == 138564
    assert c.ok and c.utilization == pytest.approx(24800 / c.usable_va)


def test_the_schema_knows_circuits():
    schema = site_schema()
    assert schema["properties"]["circuits"]["items"]["$ref"].endswith("/Circuit")
    circuit = schema["$defs"]["Circuit"]
    assert circuit["required"] == ["name", "phase", "voltage_v", "breaker_a"]
    assert "A" in circuit["properties"]["breaker_a"]["description"]
    assert "circuit" in schema["$defs"]["Feed"]["properties"]
