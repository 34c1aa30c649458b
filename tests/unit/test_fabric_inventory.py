"""Cabling checks on copies of the example site: each broken cabling is named at file:line."""

from __future__ import annotations

import shutil
from pathlib import Path

from provisioner.inventory import check, load
from provisioner.inventory.cabling import parse_port, resolve
from provisioner.inventory.findings import Severity

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example"
RULE = '    - {rule: rack_leaf, nic: roce, port_pattern: "swp{n}s0"}'


def _site(tmp_path: Path, old: str, new: str) -> list[tuple[str, str, str]]:
    for f in EXAMPLE.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    site = tmp_path / "site.yaml"
    text = site.read_text()
    assert old in text
    site.write_text(text.replace(old, new))
    return [(f.code, f.message, str(f.location)) for f in check(load(tmp_path))
            if f.severity is Severity.ERROR or f.code.startswith(("leaf", "link"))]


def test_example_links() -> None:
    loaded = load(EXAMPLE)
    links = {(lk.node, lk.switch, lk.switch_port) for lk in resolve(loaded.site, loaded.catalog)}
    assert links == {("dgx01", "leaf01", "swp1s0"), ("dgx02", "leaf01", "swp2s0")}
    assert not [f for f in check(loaded) if f.severity is Severity.ERROR]


def test_port_names() -> None:
    assert parse_port("cumulus", "swp3s1") is not None
    assert parse_port("cumulus", "swp3s1").sub == 1  # type: ignore[union-attr]
    assert parse_port("eos", "Ethernet5/2").sub == 1  # type: ignore[union-attr]
    assert parse_port("onyx", "Eth1/7").number == 7  # type: ignore[union-attr]
    assert parse_port("cumulus", "Ethernet1") is None


def test_uncabled_nic(tmp_path: Path) -> None:
    found = _site(tmp_path, RULE, "    []\n  links:\n"
                  "    - {node: dgx01, nic: roce, switch: leaf01, switch_port: swp1}")
    assert [(c, m) for c, m, _ in found if c == "roce-nic-uncabled"] == [
        ("roce-nic-uncabled", "RoCE port roce of dgx02 is not cabled to any switch")]
    assert any("placements.yaml" in loc and "dgx02" in msg for _, msg, loc in found)


def test_port_used_twice(tmp_path: Path) -> None:
    found = _site(tmp_path, RULE, RULE + "\n  links:\n"
                  "    - {node: dgx02, nic: roce, switch: leaf01, switch_port: swp1s0}")
    assert [m for c, m, _ in found if c == "switch-port-reused"] == [
        "leaf01 port swp1s0 is used twice (dgx02 roce and dgx01 roce)"]


def test_breakout_and_range(tmp_path: Path) -> None:
    found = _site(tmp_path, '"swp{n}s0"', '"swp{n}s2", first_port: 64')
    codes = {c for c, _, _ in found}
    assert "switch-breakout" in codes and "switch-port-range" in codes
    assert all("site.yaml:" in loc for _, _, loc in found)


def test_mtu_end_to_end(tmp_path: Path) -> None:
    found = _site(tmp_path, "switch_mtu_bytes: 9216", "switch_mtu_bytes: 1500")
    assert {c for c, _, _ in found} == {"mtu-mismatch"}
    assert "MTU 9000 is larger than leaf01 swp1s0 MTU 1500" in found[0][1]


def test_oversubscription_reported(tmp_path: Path) -> None:
    found = _site(tmp_path, RULE, RULE + "\n  uplinks:\n"
                  "    - {switch: leaf01, switch_port: swp64s0}")
    assert [m for c, m, _ in found if c == "leaf-oversubscribed"] == [
        "leaf01: 800 Gb/s down, 400 Gb/s up = 2.00:1 oversubscribed "
        "(RoCE training fabrics are built 1:1)"]
    found = _site(tmp_path, RULE, RULE + "\n  uplinks:\n"
                  "    - {switch: leaf01, switch_port: swp64}")
    assert found == []  # 800 down, 800 up: 1:1 is not reported


def test_rule_without_a_leaf_and_link_to_a_non_switch(tmp_path: Path) -> None:
    found = _site(tmp_path, RULE, '    - {rule: rack_leaf, nic: roce, port_pattern: "p{n}"}\n'
                  "  links:\n    - {node: dgx01, nic: roce, switch: stor01, switch_port: p1}")
    codes = [c for c, _, _ in found]
    assert "cabling-unknown-switch" in codes
    (tmp_path / "x").mkdir()
    for f in EXAMPLE.glob("*.yaml"):
        shutil.copy(f, tmp_path / "x" / f.name)
    pl = tmp_path / "x" / "placements.yaml"
    pl.write_text(pl.read_text().replace("block: sn5600", "block: mgmt-switch-1g", 1))
    codes = [f.code for f in check(load(tmp_path / "x"))]
    assert "no-rack-leaf" in codes and codes.count("roce-nic-uncabled") == 2


def test_site_without_cabling_is_valid_with_one_warning(tmp_path: Path) -> None:
    for f in EXAMPLE.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    site = tmp_path / "site.yaml"
    text = site.read_text()
    site.write_text(text[:text.index("cabling:")])
    found = check(load(tmp_path))
    assert not [f for f in found if f.severity is Severity.ERROR]
    # the example's DGX use 1 of their 8 RoCE ports (a warning of the host side, not cabling)
    assert [f.code for f in found if f.code.startswith(("fabric", "roce"))
            and not f.code.startswith("roce-rails")] == ["fabric-not-cabled"]


def test_an_uplink_is_a_port_like_any_other(tmp_path: Path) -> None:
    """An uplink on the parent of a port broken out for a host, on a host's own sub-port,
    or on a port the switch does not have is refused as a host link's would be."""
    def uplink(port: str) -> list[tuple[str, str, str]]:
        return _site(tmp_path, RULE, RULE + f"\n  uplinks:\n    - {{switch: leaf01, "
                     f"switch_port: {port}}}")

    assert [m for c, m, _ in uplink("swp1") if c == "switch-port-reused"] == [
        "leaf01 port 1 is used whole (an uplink) and broken out (dgx01 roce)"]
    assert [m for c, m, _ in uplink("swp2s0") if c == "switch-port-reused"] == [
        "leaf01 port swp2s0 is used twice (dgx02 roce and an uplink)"]
    found = uplink("swp65")
    assert [c for c, _, _ in found if c.startswith("switch-")] == ["switch-port-range"]
    assert all("site.yaml:" in loc for c, _, loc in found if c.startswith("switch-"))
    assert not [c for c, _, _ in uplink("swp64s1") if c.startswith("switch-")]


def test_a_sub_port_on_a_switch_without_breakout_is_refused(tmp_path: Path) -> None:
    """A sub-port name (swp1s0) on a switch whose catalog block has no breakout is a cable
    to a port that does not exist; it passed as a one-way split before."""
    for f in EXAMPLE.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    site = tmp_path / "site.yaml"
    site.write_text(site.read_text() + "\n".join([
        "catalog:", "  - name: sn5600-solid", "    kind: switch", "    switch_role: roce",
        "    rack_units: 2", "    max_power_w: 1400", "    typical_power_w: 940",
        "    psu: {count: 2, rating_w: 2000, redundancy: '1+1'}",
        "    nics: [{ports: 64, speed_gbps: 800}]", ""]))
    placements = tmp_path / "placements.yaml"
    text = placements.read_text()
    assert "    block: sn5600\n" in text
    placements.write_text(text.replace("    block: sn5600\n", "    block: sn5600-solid\n"))
    found = [(f.code, f.message, f.hint) for f in check(load(tmp_path))
             if f.code == "switch-breakout"]
    assert [m for _, m, _ in found] == [
        "swp1s0 is a breakout sub-port, but sn5600-solid ports do not break out (no "
        "breakout in its catalog block)",
        "swp2s0 is a breakout sub-port, but sn5600-solid ports do not break out (no "
        "breakout in its catalog block)"]
    assert "breakout: [2, 4]" in found[0][2]
