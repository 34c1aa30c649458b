"""Switch renderers: golden files per OS, parse-back round trip, host vs switch agreement.

Golden files: tests/golden/switch/<os>/ (UPDATE_GOLDEN=1 rewrites them; review the diff).
Each is based on a vendor doc example, cited in its template's header (SONiC: in sonic.py):
- cumulus: NVIDIA Cumulus Linux 5.14 "RDMA over Converged Ethernet - RoCE" (nv set qos roce)
- onyx: NVIDIA Onyx User Manual 3.10.4100 "RoCE Commands" (roce lossless, show roce)
- sonic: SONiC community config_db (PORT_QOS_MAP pfc_enable "3,4", WRED AZURE_LOSSLESS)
- eos: Arista EOS manual, PFC/QoS chapters (not verified in this project's doc search)
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner import fabric, roce
from provisioner.errors import RenderError
from provisioner.fabric.base import PortSpec, Svi, SwitchSpec, compare
from provisioner.fabric.sonic import json_patch
from provisioner.inventory import load
from provisioner.inventory.cabling import parse_port
from provisioner.inventory.models import Roce

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "switch"
PORTS = {
    "cumulus": ("swp1s0", "swp2s0", "swp64"),
    "onyx": ("Eth1/1/1", "Eth1/2/1", "Eth1/32"),
    "sonic": ("Ethernet0", "Ethernet8", "Ethernet504"),
    "eos": ("Ethernet1/1", "Ethernet2/1", "Ethernet64/1"),
    "cisco_ios": ("GigabitEthernet0/1", "GigabitEthernet0/2", "GigabitEthernet0/48"),
}
QOS_OSES = ("cumulus", "onyx", "sonic", "eos")


def _port(nos: str, name: str, description: str, mtu: int, vlan: int | None = None,
          *, tagged: bool = False) -> PortSpec:
    """A sub-port (swp1s0, Eth1/1/1, Ethernet1/1) is half of a 2-way breakout, as on the
    example site's SN5600 (catalog breakout [2])."""
    sub = parse_port(nos, name)
    return PortSpec(name, description, mtu, 2 if sub is not None and sub.sub is not None else None,
                    vlan, tagged)


def _spec(nos: str, r: Roce = Roce(), mtu: int = 9216) -> SwitchSpec:
    """Two hosts on the RoCE network's VLAN 100 (dgx01 untagged, dgx02 tagged), which the
    leaf routes (its gateway on an SVI), and an uplink outside any VLAN."""
    names = PORTS[nos]
    ports = (_port(nos, names[0], "dgx01 roce", mtu, 100),
             _port(nos, names[1], "dgx02 roce", mtu, 100, tagged=True),
             _port(nos, names[2], "uplink", mtu))
    return SwitchSpec("leaf01", nos, roce.policy(r, nos, mtu_bytes=mtu), ports,  # type: ignore[arg-type]
                      svis=(Svi("roce", 100, "10.250.2.1/24", 9000),))


@pytest.mark.parametrize("nos", sorted(PORTS))
def test_golden(nos: str) -> None:
    r = fabric.RENDERERS[nos]
    got = r.render(_spec(nos))
    golden = GOLDEN / nos / r.file_name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got)
    assert got == golden.read_text()


@pytest.mark.parametrize("nos", QOS_OSES)
def test_default_policy_agrees(nos: str) -> None:
    qos = fabric.RENDERERS[nos].parse(fabric.RENDERERS[nos].render(_spec(nos)))
    host = roce.policy(Roce())
    assert compare("dgx01", "roce", host, 9000, "leaf01", PORTS[nos][0], qos) == []


def test_ios_dialect_cannot_carry_roce() -> None:
    ios = fabric.RENDERERS["cisco_ios"]
    qos = ios.parse(ios.render(_spec("cisco_ios")))
    found = compare("dgx01", "roce", roce.policy(Roce()), 9000, "mgmt01", "GigabitEthernet0/1", qos)
    assert {m.what for m in found} >= {"pfc", "dscp-map", "mtu"}


def test_example_site_checks_clean() -> None:
    report = fabric.check(load(ROOT / "inventories" / "example"))
    assert report.links_checked == 2 and report.ok


def test_example_site_breaks_out_the_ports_it_cables() -> None:
    """The example leaf (SN5600, 800G OSFP, catalog breakout [2]) is cabled on swp1s0 and
    swp2s0: NVUE gets swp1 and swp2 split 2x (2x400G), or on a switch not already broken
    out the sub-ports would not exist (Cumulus 5.14 "Switch Port Attributes", Breakout)."""
    (leaf,) = fabric.render_all(load(ROOT / "inventories" / "example"))
    doc = yaml.safe_load(leaf.text)
    interfaces = doc[0]["set"]["interface"]
    assert list(interfaces) == ["swp1", "swp1s0", "swp2", "swp2s0"]
    assert interfaces["swp1"] == {"link": {"breakout": {"2x": {}}}}
    assert interfaces["swp2"] == {"link": {"breakout": {"2x": {}}}}
    assert interfaces["swp1s0"] == {"description": "dgx01 roce", "link": {"mtu": 9216},
                                    "bridge": {"domain": {"br_default": {"access": 100}}}}
    qos = leaf.renderer.parse(leaf.text)  # the parent entries carry no MTU of their own
    assert set(qos.port_mtu_bytes) == {"swp1s0", "swp2s0"}


def _nvue(*ports: PortSpec) -> str:
    spec = replace(_spec("cumulus"), ports=ports, svis=())
    return fabric.RENDERERS["cumulus"].render(spec)


def test_nvue_breakout_once_per_parent_and_none_where_unknown() -> None:
    doc = yaml.safe_load(_nvue(PortSpec("swp3s1", "a", 9216, 4), PortSpec("swp3s0", "b", 9216, 4),
                               PortSpec("swp5s0", "c", 9216), PortSpec("swp64", "up", 9216)))
    interfaces = doc[0]["set"]["interface"]
    assert list(interfaces) == ["swp3", "swp3s1", "swp3s0", "swp5s0", "swp64"]
    assert interfaces["swp3"] == {"link": {"breakout": {"4x": {}}}}
    assert "swp5" not in interfaces  # the block lists no breakout: nothing to set


@pytest.mark.parametrize(("ports", "why"), [
    ((PortSpec("swp1", "up", 9216), PortSpec("swp1s0", "a", 9216, 2)), "both whole and broken"),
    ((PortSpec("swp1s0", "a", 9216), PortSpec("swp1", "up", 9216)), "both whole and broken"),
    ((PortSpec("swp1s2", "a", 9216, 2),), "not a sub-port of a 2-way breakout"),
    ((PortSpec("swp1s0", "a", 9216, 3),), "not a sub-port of a 3-way breakout"),
    ((PortSpec("swp1s0", "a", 9216, 2), PortSpec("swp1s1", "b", 9216, 4)), "both 2x and 4x"),
])
def test_nvue_refuses_a_port_it_cannot_break_out(ports: tuple[PortSpec, ...], why: str) -> None:
    """A port cabled whole and broken out at once (validate refuses it between host links,
    not for an uplink), or a sub-port the split does not have."""
    with pytest.raises(RenderError, match=why):
        _nvue(*ports)


def _queues(text: str, port: str) -> dict[int, list[str]]:
    """EOS `tx-queue N` blocks of one port: N -> the lines under it."""
    out: dict[int, list[str]] = {}
    block = text[text.index(f"\ninterface {port}\n"):].split("\n!", 1)[0]
    queue = None
    for line in block.splitlines():
        if line.startswith("   tx-queue "):
            queue = int(line.split()[1])
            out[queue] = []
        elif line.startswith("      ") and queue is not None:
            out[queue].append(line.strip())
        else:
            queue = None
    return out


def test_eos_cnp_queue_strict_and_roce_queue_its_share() -> None:
    """Cumulus `qos roce` and Onyx `roce lossless` serve CNP (TC6) strict and RoCE (TC3) and
    the default class round-robin, 50/50. EOS queues are strict by default, a higher queue
    first; `no priority` on a queue makes it and the queues below it round-robin. So the
    RoCE queue is the highest round-robin one, with its share, and CNP's is above it."""
    text = fabric.RENDERERS["eos"].render(_spec("eos"))
    for port in PORTS["eos"]:
        q = _queues(text, port)
        assert q[3][:2] == ["no priority", "bandwidth percent 50"]
        assert q[0] == ["bandwidth percent 50"]
        round_robin = max(n for n, lines in q.items() if "no priority" in lines)
        assert round_robin == 3 < 6  # CNP's queue above every round-robin one: strict
        assert 6 not in q  # nothing set on it: EOS's default, strict priority


def test_eos_cnp_below_roce_keeps_every_queue_strict() -> None:
    """CNP on priority 1 (DSCP 8), RoCE on 3: EOS cannot serve a strict queue below a
    round-robin one, so no queue is made round-robin (CNP stays strict) and no share is set."""
    text = fabric.RENDERERS["eos"].render(_spec("eos", Roce(cnp_dscp=8, cnp_priority=1)))
    config = "\n".join(ln for ln in text.splitlines() if not ln.startswith("!"))
    assert "no priority" not in config and "bandwidth percent" not in config
    assert _queues(text, PORTS["eos"][0]) == {3: [
        "random-detect ecn minimum-threshold 150 kbytes maximum-threshold 1500 kbytes "
        "max-mark-probability 100"]}



@st.composite
def valid_roce(draw: st.DrawFn) -> Roce:
    prio = draw(st.integers(0, 7))
    cnp = draw(st.integers(0, 7).filter(lambda p: p != prio))
    dscp = draw(st.integers(0, 63))
    cnp_dscp = draw(st.integers(0, 63).filter(lambda d: d != dscp))
    mode = draw(st.sampled_from(["lossless", "lossy"]))
    return Roce(dscp=dscp, priority=prio, cnp_dscp=cnp_dscp, cnp_priority=cnp, mode=mode)


@settings(max_examples=60, deadline=None)
@given(r=valid_roce(), host_mtu=st.integers(1500, 9000), nos=st.sampled_from(QOS_OSES))
def test_any_valid_policy_agrees(r: Roce, host_mtu: int, nos: str) -> None:
    renderer = fabric.RENDERERS[nos]
    spec = _spec(nos, r)
    nvidia_classes = (r.dscp, r.priority, r.cnp_dscp, r.cnp_priority) == (26, 3, 48, 6)
    if nos in ("onyx", "cumulus") and not nvidia_classes:
        with pytest.raises(RenderError, match="default RoCE classes"):
            renderer.render(spec)
        return
    qos = renderer.parse(renderer.render(spec))
    assert compare("dgx01", "roce", roce.policy(r), host_mtu, "leaf01", PORTS[nos][0], qos) == []


@pytest.mark.parametrize("nos", ["sonic", "eos"])
def test_broken_pair_names_both_ends(nos: str) -> None:
    host = roce.policy(Roce(priority=3))
    renderer = fabric.RENDERERS[nos]
    qos = renderer.parse(renderer.render(_spec(nos, Roce(priority=4, cnp_priority=6))))
    found = compare("dgx01", "roce", host, 9000, "leaf01", PORTS[nos][0], qos)
    by_what = {m.what: m for m in found}
    assert "dscp-map" in by_what
    m = by_what["dscp-map"]
    assert (m.host, m.nic, m.switch, m.port) == ("dgx01", "roce", "leaf01", PORTS[nos][0])
    assert m.host_value == "DSCP 26 -> priority 3" and m.switch_value == "DSCP 26 -> priority 4"
    if nos == "eos":  # SONiC keeps 3,4 lossless, so PFC on 3 still agrees there
        assert by_what["pfc"].host_value == "3" and by_what["pfc"].switch_value == "4"


@pytest.mark.parametrize("nos", ["cumulus", "onyx"])
def test_broken_pair_nvidia_dialects(nos: str) -> None:
    """NVUE/Onyx render NVIDIA's classes only; a host on priority 4 is caught against them."""
    host = roce.policy(Roce(priority=4))
    r = fabric.RENDERERS[nos]
    qos = r.parse(r.render(_spec(nos)))
    found = {m.what: m for m in compare("dgx01", "roce", host, 9000, "leaf01", PORTS[nos][0], qos)}
    assert (found["pfc"].host_value, found["pfc"].switch_value) == ("4", "3")
    assert found["pfc"].switch == "leaf01" and found["pfc"].port == PORTS[nos][0]


def test_mtu_too_small_named() -> None:
    r = fabric.RENDERERS["cumulus"]
    qos = r.parse(r.render(_spec("cumulus", mtu=1500)))
    found = compare("dgx01", "roce", roce.policy(Roce()), 9000, "leaf01", "swp1s0", qos)
    assert [(m.what, m.host_value, m.switch_value) for m in found] == [("mtu", "9000", "1500")]


def test_sonic_puts_every_lossy_class_in_a_buffered_priority_group() -> None:
    """SONiC's buffer templates give priority groups 0, 3 and 4 their profiles: the CNP
    class (6) and every other lossy class go to group 0, as SONiC's own AZURE map does,
    and each lossless priority keeps a group of its own."""
    db = json.loads(fabric.RENDERERS["sonic"].render(_spec("sonic")))
    assert db["TC_TO_PRIORITY_GROUP_MAP"]["AZURE"] == {
        "0": "0", "1": "0", "2": "0", "3": "3", "4": "4", "5": "0", "6": "0", "7": "7"}
    pfc = roce.policy(Roce(), "sonic").pfc_priorities
    assert all(db["TC_TO_PRIORITY_GROUP_MAP"]["AZURE"][str(q)] == str(q) for q in pfc)


def test_sonic_patch_removes_the_buffer_groups_an_earlier_render_wrote() -> None:
    """An earlier renderer wrote BUFFER_PG "Ethernet0|3" on the pool profile (no headroom,
    overlapping SONiC's own "3-4"): the patch removes those, and keeps SONiC's own
    lossless group and one an operator set on another profile."""
    from provisioner.fabric.sonic import patch
    desired = json.loads(fabric.RENDERERS["sonic"].render(_spec("sonic")))
    assert "BUFFER_PG" not in desired
    running = {"BUFFER_PG": {
        "Ethernet0|3": {"profile": "ingress_lossless_profile"},
        "Ethernet0|4": {"profile": "ingress_lossless_profile"},
        "Ethernet0|3-4": {"profile": "pg_lossless_400000_5m_profile"},
        "Ethernet8|5": {"profile": "my_headroom_override"}}}
    after = jsonpatch.apply_patch(running, patch(running, desired))
    assert after["BUFFER_PG"] == {
        "Ethernet0|3-4": {"profile": "pg_lossless_400000_5m_profile"},
        "Ethernet8|5": {"profile": "my_headroom_override"}}
    assert patch(after, desired) == []  # idempotent


def test_sonic_json_patch_applies_and_keeps_other_config() -> None:
    desired = json.loads(fabric.RENDERERS["sonic"].render(_spec("sonic")))
    running = {"PORT": {"Ethernet0": {"lanes": "0,1,2,3", "mtu": "1500"}},
               "DEVICE_METADATA": {"localhost": {"hostname": "leaf01"}}}
    ops = json_patch(running, desired)
    assert {"op": "replace", "path": "/PORT/Ethernet0/mtu", "value": "9216"} in ops
    after = jsonpatch.apply_patch(running, ops)
    assert after["PORT"]["Ethernet0"]["lanes"] == "0,1,2,3"
    assert after["DEVICE_METADATA"] == running["DEVICE_METADATA"]
    assert after["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3,4"
    assert json_patch(after, desired) == []  # idempotent: nothing left to change


def test_eos_queue_command_follows_the_switch() -> None:
    """ECN goes under the queue command the switch's ASIC has (SwitchAccess.eos_queue)."""
    tx = fabric.RENDERERS["eos"].render(_spec("eos"))
    uc = fabric.RENDERERS["eos"].render(replace(_spec("eos"), queue="uc-tx-queue"))
    ecn = "      random-detect ecn minimum-threshold 150 kbytes"
    assert f"\n   tx-queue 3\n      no priority\n      bandwidth percent 50\n{ecn}" in tx
    assert "\n   uc-tx-queue" not in tx
    assert f"\n   uc-tx-queue 3\n      no priority\n      bandwidth percent 50\n{ecn}" in uc
    assert "\n   uc-tx-queue 0\n      bandwidth percent 50\n" in uc
    assert "\n   tx-queue" not in uc


def _leaf_os(tmp_path: Path, management: str) -> Path:
    import shutil

    site = tmp_path / "site"
    shutil.copytree(ROOT / "inventories" / "example", site,
                    ignore=shutil.ignore_patterns(".provision"))
    f = site / "placements.yaml"
    old = "management: {os: cumulus, credentials: switch}"
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, f"management: {{{management}, credentials: switch}}"))
    (site / "site.yaml").write_text(
        (site / "site.yaml").read_text().replace('"swp{n}s0"', '"Ethernet{n}/1"'))
    return site


@pytest.mark.parametrize(("management", "code", "queue"), [
    ("os: eos", "eos-queue-unset", "tx-queue"),
    ("os: eos, eos_queue: uc-tx-queue", None, "uc-tx-queue"),
    ("os: cumulus, eos_queue: tx-queue", "eos-queue-not-eos", None),
])
def test_eos_queue_in_the_inventory(tmp_path: Path, management: str, code: str | None,
                                    queue: str | None) -> None:
    from provisioner.inventory.checks import check

    loaded = load(_leaf_os(tmp_path, management))
    codes = {f.code: f for f in check(loaded)}
    for c in ("eos-queue-unset", "eos-queue-not-eos"):
        assert (c in codes) is (c == code), sorted(codes)
    if code:
        assert codes[code].location.file.endswith("placements.yaml")
        text = (tmp_path / "site" / "placements.yaml").read_text()
        at = text[:text.index(management if code == "eos-queue-unset" else "eos_queue")]
        assert codes[code].location.line == at.count("\n") + 1
    if queue:
        text = next(r.text for r in fabric.render_all(loaded) if r.spec.nos == "eos")
        assert f"\n   {queue} 3\n" in text


def test_eos_queue_is_asked_of_roce_switches_only(tmp_path: Path) -> None:
    """The management switch renders no RoCE config: no queue to name."""
    from provisioner.inventory.checks import check

    site = _leaf_os(tmp_path, "os: cumulus")
    f = site / "placements.yaml"
    old = "management: {os: cisco_ios, credentials: switch}"
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, "management: {os: eos, credentials: switch}"))
    assert "eos-queue-unset" not in {x.code for x in check(load(site))}
