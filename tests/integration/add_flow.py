"""Plug-and-play end to end (issue 13), run by tests/integration/test_up.py on its lab once
the example site is up there (no lab of its own: CI time).

Two nodes the inventory does not know are started; `provision discover` finds exactly those
two among the lab's BMCs and fingerprints each to its block; the DGX H100 would overload
the rack and is refused with exit 4; `provision add --discovered ... --yes` places the
other, writes the inventory and brings that node alone to ready. Asserted: the other nodes'
state and event logs show nothing but the one step the join needs on the first control
plane; Ansible touched no other host; the switch got the new node's port and nothing else
(another port's drift is left for `fabric push`); the join ran in check mode and says so;
the discovered entry became the host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from provisioner import lab as lab_mod
from provisioner import profile
from provisioner.credentials import CredentialResolver
from provisioner.lab import unknown
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.state import StateStore
from provisioner.switches import cli_diff, ops
from provisioner.switches.base import SwitchDriver
from provisioner.workflows.steps.join import LAB_JOIN_NOTE
from provisioner.workflows.up import state_path
from tests.integration.conftest import provision

SERVERS = {"dgx01", "dgx02", "stor01", "cp01", "cp02", "cp03"}
NEW_PORT = {("interface swp3s0",), ("interface swp3s0", "description dgx03 roce")}


def _leaf(site: Path) -> SwitchDriver:
    """leaf01's lab stand-in (FRR's vtysh over SSH), driven as `fabric push` drives it."""
    from provisioner.switches.netmiko_driver import NetmikoDriver

    loaded = load(site)
    stand_ins = profile.for_site(loaded).stand_ins  # the lab's, from its overlay
    ep = ops.endpoint(loaded, "leaf01", CredentialResolver(loaded, os.environ),
                      stand_ins=stand_ins)
    assert ep.nos == "cisco_ios" and stand_ins == {"leaf01": "cisco_ios"}  # lab/switch.py
    return NetmikoDriver(ep)


def _hosts_ansible_ran_on(artifact_dirs: list[str]) -> set[str]:
    """Every inventory host a task (fact gathering included) ran for, from the runs'
    ansible-runner job events."""
    seen = set()
    for d in artifact_dirs:
        for f in Path(d).glob("job_events/*.json"):
            ev: dict[str, Any] = json.loads(f.read_text())
            if str(ev.get("event", "")).startswith("runner_on_"):
                seen.add(ev["event_data"]["host"])
    return seen


def discover_add_and_bring_up(site: Path, state: lab_mod.LabState) -> None:
    # Up already (test_up.py's tests leave every node ready): nothing to do. Run alone after
    # the end-to-end test (which ends on a lost state store), the hosts, configured by the
    # real roles there, are taken back to ready with the trivial playbook.
    res = provision("up", str(site), "--json", "--reinstall", "*", "--playbook", "ping.yml",
                    "--verify-playbook", "ping.yml", timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert {n["hostname"]: n["phase"] for n in json.loads(res.stdout)["nodes"]} == \
        dict.fromkeys(SERVERS, "ready")
    store = StateStore(state_path(load(site)))
    before = {h: len(store.events(h)) for h in SERVERS}
    drv = _leaf(site)
    try:  # another port drifted (dgx01's description is gone): an addition leaves it so
        assert drv.apply(["interface swp1s0", "no description"]).failed is None
        switch_before = set(cli_diff.paths(drv.running_config()))
    finally:
        drv.close()
    assert ("interface swp1s0", "description dgx01 roce") not in switch_before
    assert not NEW_PORT & switch_before

    loaded = load(site)
    small = unknown.add_unknown(loaded, "dgx-1")
    big = unknown.add_unknown(loaded, "dgx-h100")
    ports = {str(ep["port"]) for ep in state.endpoints.values() if "system_id" in ep}
    args = ["discover", str(site), "--range", "127.0.0.1/32", "--scheme", "http",
            "--ipmi-port", str(state.endpoints["cp03"]["port"]), "--json"]
    for port in sorted(ports | {str(small.port), str(big.port)}):
        args += ["--redfish-port", port]
    res = provision(*args)
    assert res.returncode == 0, res.stdout + res.stderr
    found = json.loads(res.stdout)
    # every known lab BMC answered and was left alone (cp03's RMCP answer comes from the
    # same address as the Redfish ones, so it counts as that BMC, as a real BMC speaking
    # both would); only the two unknown ones are reported
    assert found["known_skipped"] == len(ports)
    by_port = {n["port"]: n for n in found["nodes"]}
    assert set(by_port) == {small.port, big.port}
    assert by_port[small.port]["block"] == "dgx-1"
    assert by_port[big.port]["block"] == "dgx-h100"
    assert by_port[big.port]["serial"] == big.serial
    assert sum(g["count"] for g in by_port[big.port]["gpus"]) == 8
    assert found["credentials"] == lab_mod.LAB_CREDENTIALS

    res = provision("add", str(site), "--discovered", by_port[big.port]["id"], "--yes")
    assert res.returncode == 4, res.stdout + res.stderr
    assert "exceeds" in res.stdout + res.stderr
    placements = (site / "placements.yaml").read_text()
    assert "dgx-h100" in placements and "dgx03" not in placements  # nothing written

    small_id = by_port[small.port]["id"]
    res = provision("add", str(site), "--discovered", small_id, "--yes", "--json",
                    timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    added = json.loads(res.stdout)
    host = added["hostname"]
    assert (host, added["block"], added["rack"], added["u"]) == ("dgx03", "dgx-1", "r01", 21)
    assert [(n["hostname"], n["phase"]) for n in added["up"]["nodes"]] == [(host, "ready")]
    assert LAB_JOIN_NOTE in added["up"]["notes"]  # the output says the join was check mode
    grown = load(site)
    node = next(n for p in grown.site.placements for n in p.nodes if n.hostname == host)
    assert str(node.addresses["mgmt"]) == "10.250.0.23"
    # the NIC the BMC's PXE boot option names, not the first MAC (its data ports sort first)
    assert node.macs == {"mgmt": small.mgmt_mac}
    # a real BMC's place in the inventory: the OOB address, the site's own login name
    assert "bmc: {protocol: redfish, address: 10.250.1.23, credentials: bmc}" \
        in (site / "placements.yaml").read_text().split(host)[1]

    # the state: the new node ready, the discovered entry became it (its history kept),
    # the refused one still discovered; no other node moved
    store = StateStore(state_path(grown))
    assert {n.hostname: n.phase.value for n in store.nodes()} == {
        **dict.fromkeys(SERVERS, "ready"), host: "ready", by_port[big.port]["id"]: "discovered"}
    assert [e.kind for e in store.events(small_id)][-1] == "added"
    assert store.check_consistency() == []
    # the other nodes' event logs: nothing new, but the join's one step on the first
    # control plane (a join token and the labels come from there), in check mode
    new = {h: store.events(h)[before[h]:] for h in SERVERS}
    assert {h: [e.kind for e in evs] for h, evs in new.items() if evs} == {
        "cp01": ["join_delegated"]}
    assert new["cp01"][0].detail["for"] == [host] and new["cp01"][0].detail["check_mode"]
    join = [e.detail for e in store.events(host) if e.kind == "join"]
    assert len(join) == 1 and join[0]["check_mode"] and join[0]["via"] == "cp01"
    # templated for real (an undefined variable would fail it), and the join itself
    # predicted, not run
    tasks = join[0]["tasks"]
    assert tasks["Write the join configuration with the bootstrap token and certificate "
                 "key"] in ("ok", "changed")
    assert tasks["Join the workers"] == "changed"  # dgx03 is a worker
    # Ansible ran for the new node alone (delegated tasks count as its own)
    assert _hosts_ansible_ran_on(added["up"]["artifact_dirs"]) == {host}

    # the switch: the new node's port and nothing else, through `fabric push`'s code path
    pushes = [e.detail for e in store.events("leaf01") if e.kind == "fabric_push"]
    assert pushes[-1]["status"] == "pushed" and pushes[-1]["ports_of"] == [host]
    assert [c.strip() for c in pushes[-1]["applied"]] == ["interface swp3s0",
                                                          "description dgx03 roce"]
    drv = _leaf(site)
    try:
        switch_after = set(cli_diff.paths(drv.running_config()))
    finally:
        drv.close()
    assert switch_after - switch_before == NEW_PORT
    assert switch_before - switch_after == set()  # dgx01's drift left as it was
