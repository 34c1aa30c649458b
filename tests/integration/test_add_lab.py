"""Plug-and-play end to end in the lab (issue 13): with the example site's lab running
(real sushy-tools behind the Redfish shape layer, ipmi_sim, SSH test hosts), two nodes the
inventory does not know are started; `provision discover` finds exactly those two among
the lab's BMCs and fingerprints each to its block; `provision add --discovered ... --yes`
places the one that fits, writes the inventory, and brings that node alone to ready; the
other, a DGX H100, would overload the rack and is refused with exit 4 and the numbers."""

from __future__ import annotations

import json

import pytest

from provisioner import lab as lab_mod
from provisioner.inventory import load
from provisioner.lab import unknown
from provisioner.state import StateStore
from provisioner.workflows.up import state_path
from tests.conftest import EXAMPLE, requires_ssh_hosts
from tests.integration.conftest import provision, requires_ipmi_sim, ssh_lab

pytestmark = [pytest.mark.integration, requires_ipmi_sim, requires_ssh_hosts]
SERVERS = {"dgx01", "dgx02", "stor01", "cp01", "cp02", "cp03"}


def test_discover_fingerprint_add_and_bring_up_only_that_node(tmp_path_factory) -> None:
    with ssh_lab(tmp_path_factory, EXAMPLE, "add") as (site, state):
        loaded = load(site)
        small = unknown.add_unknown(loaded, "dgx-1")
        big = unknown.add_unknown(loaded, "dgx-h100")
        ports = {str(ep["port"]) for ep in state.endpoints.values() if "system_id" in ep}
        ipmi_port = state.endpoints["cp03"]["port"]
        args = ["discover", str(site), "--range", "127.0.0.1/32", "--scheme", "http",
                "--ipmi-port", str(ipmi_port), "--json"]
        for port in sorted(ports | {str(small.port), str(big.port)}):
            args += ["--redfish-port", port]
        res = provision(*args)
        assert res.returncode == 0, res.stdout + res.stderr
        found = json.loads(res.stdout)
        # every known lab BMC answered and was left alone (cp03's RMCP answer comes from
        # the same address as the Redfish ones, so it counts as that BMC, as a real BMC
        # speaking both would); only the two unknown ones are reported
        assert found["known_skipped"] == len(ports)
        by_port = {n["port"]: n for n in found["nodes"]}
        assert set(by_port) == {small.port, big.port}
        assert by_port[small.port]["block"] == "dgx-1"
        assert by_port[big.port]["block"] == "dgx-h100"
        assert by_port[big.port]["serial"] == big.serial
        assert sum(g["count"] for g in by_port[big.port]["gpus"]) == 8
        assert found["credentials"] == lab_mod.LAB_CREDENTIALS
        store = StateStore(state_path(load(site)))
        assert {n.phase.value for n in store.nodes()} == {"discovered"}

        res = provision("add", str(site), "--discovered", by_port[big.port]["id"], "--yes")
        assert res.returncode == 4, res.stdout + res.stderr
        assert "exceeds" in res.stdout + res.stderr
        placements = (site / "placements.yaml").read_text()
        assert "dgx-h100" in placements and "dgx03" not in placements  # nothing written

        res = provision("add", str(site), "--discovered", by_port[small.port]["id"],
                        "--yes", "--json", timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        added = json.loads(res.stdout)
        host = added["hostname"]
        assert (host, added["block"], added["rack"], added["u"]) == ("dgx03", "dgx-1", "r01", 21)
        assert added["up"]["nodes"][0]["hostname"] == host
        assert added["up"]["nodes"][0]["phase"] == "ready"
        grown = load(site)
        node = next(n for p in grown.site.placements for n in p.nodes if n.hostname == host)
        assert str(node.addresses["mgmt"]) == "10.250.0.23"
        # the inventory keeps the site's own login name, not the lab's
        # a real BMC's place in the inventory: the OOB address, the site's own login name
        assert "bmc: {protocol: redfish, address: 10.250.1.23, credentials: bmc}" \
            in (site / "placements.yaml").read_text().split(host)[1]

        store = StateStore(state_path(grown))
        phases = {n.hostname: n.phase.value for n in store.nodes()}
        assert phases[host] == "ready"
        assert not SERVERS & set(phases)  # no other node was enrolled, let alone moved
        for other in SERVERS:
            assert store.events(other) == []
