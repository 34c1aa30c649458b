"""`fabric check --live`, the pure part (fabric/live.py): `mlnx_qos -i` output as NVIDIA
documents it, compared with a switch as its running config shows it.

MLNX_QOS_DOC is the `mlnx_qos -i eth2` example of the Mellanox community page "mlnx_qos"
(DOC-2792, MLNX_OFED 4.2): trust dscp, the default dscp2prio map (DSCP 26 -> 3, 48 -> 6),
PFC on 0, 2, 6, 7. MLNX_QOS_PFC3 is the same after the page's `mlnx_qos -i eth2 -f
0,0,0,1,0,0,0,0` (PFC on 3 only), the host side of NVIDIA's lossless RoCE.
"""

from __future__ import annotations

import pytest

from provisioner import fabric, roce
from provisioner.fabric import PortSpec, SwitchSpec
from provisioner.fabric.live import HostQos, compare_live, parse_mlnx_qos
from provisioner.inventory.models import Roce

MLNX_QOS_DOC = """\
DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
        prio:0 dscp:07,06,05,04,03,02,01,00,
        prio:1 dscp:15,14,13,12,11,10,09,08,
        prio:2 dscp:23,22,21,20,19,18,17,16,
        prio:3 dscp:31,30,29,28,27,26,25,24,
        prio:4 dscp:39,38,37,36,35,34,33,32,
        prio:5 dscp:47,46,45,44,43,42,41,40,
        prio:6 dscp:55,54,53,52,51,50,49,48,
        prio:7 dscp:63,62,61,60,59,58,57,56,
Cable len: 10
PFC configuration:
        priority    0   1   2   3   4   5   6   7
        enabled     1   0   1   0   0   0   1   1

tc: 0 ratelimit: unlimited, tsa: ets, bw: 10%
         priority:  1
tc: 6 ratelimit: unlimited, tsa: strict
         priority:  6
"""
MLNX_QOS_PFC3 = MLNX_QOS_DOC.replace("enabled     1   0   1   0   0   0   1   1",
                                     "enabled     0   0   0   1   0   0   0   0")
PORT = {"cumulus": "swp1s0", "sonic": "Ethernet0", "eos": "Ethernet1/1", "onyx": "Eth1/1/1"}


def _switch(nos: str, r: Roce = Roce()) -> fabric.SwitchQos:
    spec = SwitchSpec("leaf01", nos, roce.policy(r, nos, mtu_bytes=9216),  # type: ignore[arg-type]
                      (PortSpec(PORT[nos], "dgx01 roce", 9216),))
    renderer = fabric.RENDERERS[nos]
    return renderer.parse(renderer.render(spec))


def test_documented_output_parses() -> None:
    seen = parse_mlnx_qos(MLNX_QOS_DOC)
    assert seen.trust_dscp is True
    assert seen.dscp_to_priority[26] == 3 and seen.dscp_to_priority[48] == 6
    assert len(seen.dscp_to_priority) == 64
    assert seen.pfc_priorities == frozenset({0, 2, 6, 7})


def test_not_mlnx_qos_output_is_refused() -> None:
    with pytest.raises(ValueError, match="not mlnx_qos output"):
        parse_mlnx_qos("bash: mlnx_qos: command not found\n")


@pytest.mark.parametrize("nos", sorted(PORT))
def test_a_host_configured_as_nvidia_recommends_agrees_with_every_switch(nos: str) -> None:
    seen = parse_mlnx_qos(MLNX_QOS_PFC3)
    assert compare_live(roce.policy(Roce()), "dgx01", "roce", 9000, seen, "leaf01", PORT[nos],
                        _switch(nos)) == []


def test_host_pfc_on_the_wrong_priorities_names_both_ends() -> None:
    seen = parse_mlnx_qos(MLNX_QOS_DOC)  # PFC 0,2,6,7; the switch is lossless on 3
    found = {m.what: m for m in compare_live(roce.policy(Roce()), "dgx01", "roce", 9000, seen,
                                             "leaf01", "swp1s0", _switch("cumulus"))}
    m = found["pfc"]
    assert (m.host, m.nic, m.switch, m.port) == ("dgx01", "roce", "leaf01", "swp1s0")
    assert (m.host_value, m.switch_value) == ("0,2,6,7", "3")


def test_host_on_3_switch_on_4_is_caught() -> None:
    seen = parse_mlnx_qos(MLNX_QOS_PFC3)
    switch = _switch("eos", Roce(priority=4, cnp_priority=6))
    found = {m.what: m for m in compare_live(roce.policy(Roce()), "dgx01", "roce", 9000, seen,
                                             "leaf01", "Ethernet1/1", switch)}
    assert (found["pfc"].host_value, found["pfc"].switch_value) == ("3", "4")
    assert found["dscp-map"].switch_value == "DSCP 26 -> priority 4"


def test_host_trusting_pcp_is_a_mismatch() -> None:
    seen = parse_mlnx_qos(MLNX_QOS_PFC3.replace("trust state: dscp", "trust state: pcp"))
    found = compare_live(roce.policy(Roce()), "dgx01", "roce", 9000, seen, "leaf01", "swp1s0",
                         _switch("cumulus"))
    assert [m.what for m in found] == ["trust"]
    assert found[0].host_value == "host trusts pcp, not DSCP"


def test_host_mapping_rocev2_dscp_elsewhere_is_named() -> None:
    seen = HostQos(True, {26: 4, 48: 6}, frozenset({3}))
    found = {m.what for m in compare_live(roce.policy(Roce()), "dgx01", "roce", 9000, seen,
                                          "leaf01", "swp1s0", _switch("cumulus"))}
    assert "dscp-map" in found


# mlnx_qos itself indents its rows with a tab (mlnx-tools' python/mlnx_qos, pretty_print)
TABBED = MLNX_QOS_PFC3.replace("        enabled     ", "\tenabled     ").replace(
    "        priority    ", "\tpriority    ")


@pytest.mark.parametrize(("output", "mode", "ok"), [
    (MLNX_QOS_PFC3, "lossless", True),  # trust dscp, PFC on 3 only: the site's lossless RoCE
    (TABBED, "lossless", True),
    (MLNX_QOS_DOC, "lossless", False),  # PFC on 0, 2, 6 and 7
    (MLNX_QOS_DOC, "lossy", False),  # lossy RoCE: the QoS script turns PFC off everywhere
    (MLNX_QOS_PFC3.replace("enabled     0   0   0   1", "enabled     0   0   0   0"),
     "lossy", True),
    (MLNX_QOS_PFC3.replace("trust state: dscp", "trust state: pcp"), "lossless", False),
    # someone moved DSCP 26 to priority 4: RoCE would leave on a priority without PFC
    (MLNX_QOS_PFC3.replace("dscp:31,30,29,28,27,26,25,24,", "dscp:31,30,29,28,27,25,24,")
     .replace("dscp:39,38,", "dscp:39,38,26,"), "lossless", False),
    ("mlnx_qos: command printed nothing useful\n", "lossless", False)])
def test_node_verify_checks_trust_map_and_pfc_as_mlnx_qos_reports_them(output, mode, ok):
    """node_verify reads `mlnx_qos -i` per RoCE port: trust DSCP, the RoCE and CNP DSCPs on
    their priorities, and PFC as the site's mode wants it, with the same reading as
    fabric/live.py (the word "dscp" alone is in every output: the dscp2prio table)."""
    from tests.conftest import ansible_eval, holds, role_task

    task = role_task("node_verify", "Verify each RoCE port's trust, DSCP map and PFC")
    pfc = roce.policy(Roce(mode=mode)).pfc_vector
    item = {"item": "ens1f0np0", "stdout": output}
    site = {"roce_host_priority": 3, "roce_host_cnp_priority": 6, "roce_host_dscp": 26,
            "roce_host_cnp_dscp": 48, "roce_host_pfc": pfc}
    seen = {name: ansible_eval(expr, item=item, **site) for name, expr in task["vars"].items()}
    assert all(holds(c, item=item, **seen, **site)
               for c in task["ansible.builtin.assert"]["that"]) is ok
    if "enabled" in output:
        try:
            parsed = parse_mlnx_qos(output).pfc_priorities
        except ValueError:
            return
        bits = ",".join("1" if i in parsed else "0" for i in range(8))
        assert seen["node_verify_pfc_seen"] == bits
