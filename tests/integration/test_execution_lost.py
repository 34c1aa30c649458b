"""A run's two playbook stages over two lab execution nodes, the first node killed by PID
before the first stage: its share runs again on the other node, and the second stage goes
to the live node at once instead of losing each share's first attempt to the dead one
again; `provision status` says which node ran what.

One lab at a time on this machine: run under `flock /tmp/h/lab.lock`.
"""

from __future__ import annotations

import json
import threading

import pytest

from provisioner import lab as lab_mod
from provisioner import render
from provisioner.inventory.topology import servers
from provisioner.lab import execution as lab_execution
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.workflows.engine import Journal
from provisioner.workflows.steps import Context
from provisioner.workflows.steps.ansible import Playbook
from tests.conftest import add_provisioning, moved_to, requires_ssh_hosts
from tests.integration.conftest import provision, requires_ipmi_sim
from tests.integration.test_lab_hosts_health import HOSTS, write_site

pytestmark = [pytest.mark.integration, requires_ipmi_sim, requires_ssh_hosts]


def test_a_lost_node_is_left_out_of_the_later_stages(tmp_path_factory):
    site = write_site(tmp_path_factory.mktemp("ex"))
    [mgmt] = [n for n in load(site).site.networks if n.name == "mgmt"]
    base = str(mgmt.cidr.network_address).rsplit(".", 1)[0]
    add_provisioning(site / "site.yaml", "provisioning:\n  execution:\n    split_by: host\n"
                     "    connect_timeout_s: 5\n    nodes:\n"
                     f"      - {{name: ex1, address: {base}.201}}\n"
                     f"      - {{name: ex2, address: {base}.202}}\n")
    state = lab_mod.up(load(site), ssh_hosts=True, start_timeout_s=120)
    try:
        loaded = load(site)  # with the overlay: the lab's endpoints and execution nodes
        profile = for_site(loaded)
        store = StateStore(profile.state_path)
        moved_to(store, list(HOSTS), Phase.OS_READY)
        journal = Journal(store, store.start_run("test"), None)
        journal.load(list(HOSTS))
        ctx = Context(loaded, {}, journal, threading.Event(),
                      {s.hostname: s for s in servers(loaded)}, profile,
                      project_dir=render.render(loaded, profile.state_path.parent / "ansible",
                                                lab=True).out)
        assert lab_execution.kill(state.execution_hosts, "ex1")
        Playbook(ctx, "ping.yml", "configure", Phase.OS_READY, Phase.CONFIGURED, 10)(
            list(HOSTS))
        assert set(ctx.lost_workers) == {"ex1"}
        Playbook(ctx, "ping.yml", "verify", Phase.CONFIGURED, Phase.VERIFIED, 10)(
            list(HOSTS))
        tried = [(e.detail["step"], e.hostname, e.detail["worker"], e.detail["attempt"],
                  e.detail["lost"] is not None) for e in store.events(kind="execution")]
        first = [t for t in tried if t[0] == "configure"]
        assert {t[2] for t in first if t[4]} == {"ex1"}  # lost once, in the first stage
        assert all((t[2], t[3]) == ("ex2", 2) for t in first if t[2] != "ex1"
                   and any(u[1] == t[1] and u[4] for u in first))
        assert sorted((h, w, n) for s, h, w, n, lost in tried if s == "verify") == [
            (h, "ex2", 1) for h in HOSTS]  # the old code tried ex1 first again here
        assert all(store.node(h).phase is Phase.VERIFIED for h in HOSTS)
        doc = json.loads(provision("status", str(site), "--json").stdout)
        ran = {n["hostname"]: [(a["step"], a["worker"]) for a in n["execution"]]
               for n in doc["nodes"]}
        assert all(ran[h][-1] == ("verify", "ex2") for h in HOSTS), ran
    finally:
        lab_mod.down(load(site))
