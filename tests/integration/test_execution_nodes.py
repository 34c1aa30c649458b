"""site.yml across two execution nodes (ansible-runner transmit -> ssh worker -> process)
against the lab's SSH hosts, compared with the same playbook run locally on fresh hosts
(the converged pair's run, which the upgrade tests used before: one converge for both);
then (same lab) an execution node killed by PID mid-run, `provision doctor` before and
after, and the dead node's share of a playbook not safe to repeat.

One lab at a time on this machine: run under `flock /tmp/pv-lab.lock`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from provisioner import lab as lab_mod
from provisioner import render, runner
from provisioner.execution import dispatch
from provisioner.execution import doctor as doctor_mod
from provisioner.execution.stream import ssh_argv
from provisioner.lab import execution as lab_execution
from provisioner.lab import wheelhouse
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from tests.conftest import EXAMPLE, add_provisioning, requires_ssh_hosts
from tests.integration.conftest import PAIR, ConvergedPair, provision, requires_ipmi_sim

pytestmark = [pytest.mark.integration, requires_ipmi_sim, requires_ssh_hosts]

HOSTS = {"cp01", "cp02", "cp03", "dgx01", "dgx02", "stor01"}
# site.yml runs over the converged pair's two hosts, one per execution node: on CI's 2
# cores Ansible's time grows with the hosts.
RUN = PAIR
EXECUTION = """
provisioning:
  execution:
    split_by: host          # the example site is one rack: each host its own domain
    nodes:
      - {name: ex1, address: 10.250.0.201}
      - {name: ex2, address: 10.250.0.202}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("exec") / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    add_provisioning(dest / "site.yaml", EXECUTION)
    return dest


def fresh_lab(site: Path) -> tuple[lab_mod.LabState, Path]:
    """The lab (re)started: fresh copy-on-write hosts; the rendered project."""
    lab_mod.down(load(site))
    state = lab_mod.up(load(site), ssh_hosts=True)
    loaded = load(site)
    out = render.render(loaded, loaded.base_dir / ".provision" / "ansible", lab=True).out
    return state, out


# Tasks the kubernetes role runs on one host of each batch (run_once, or the batch's first
# host): each execution node runs its own batch, so they run once per node, on another host
# than in one local run. Their ok events are left out of the comparison; nothing else is.
ONCE_PER_BATCH = {"Find the control planes that hold the cluster (admin.conf and the kubeadm "
                  "mark)", "Add the Helm package repository",
                  "Read the Helm installed on the first control plane",
                  "Install Helm on the first control plane"}


def counts(result: runner.RunResult) -> dict[str, tuple[int, int, int, int]]:
    once = {h: len([e for e in result.events if e.host == h and e.task in ONCE_PER_BATCH
                    and e.status == "ok"]) for h in result.hosts}
    return {h: (s.ok - once[h], s.changed, s.failed, s.unreachable)
            for h, s in result.hosts.items()}


def test_same_outcome_locally_and_across_execution_nodes_then_a_killed_node(
        site, converged_pair: ConvergedPair):
    local = converged_pair.result  # site.yml run locally over RUN on fresh hosts
    converged_pair.stop()  # its lab: this test's starts on the same addresses
    try:
        state, out = fresh_lab(site)
        assert [h.name for h in state.execution_hosts] == ["ex1", "ex2"]
        loaded = load(site)
        ex = loaded.site.provisioning.execution
        assert_installed_from_the_wheelhouse(state, ex)
        attempts: list[tuple[str, int, str | None]] = []
        outcomes = dispatch.run_batch(
            ex, {}, out, "site.yml", RUN, idempotent=True,
            record=lambda a, n: attempts.append((a.worker, n, a.lost)))
        assert [o.final.worker for o in outcomes] == ["ex1", "ex2"]
        assert all(o.final.result and o.final.result.ok for o in outcomes)
        merged: dict[str, tuple[int, int, int, int]] = {}
        for o in outcomes:
            assert o.final.result is not None
            merged |= counts(o.final.result)
            events = Path(o.final.result.artifact_dir) / "job_events"
            assert len(list(events.glob("*.json"))) > 10  # written here, as locally
            assert set(o.final.result.hosts) == set(o.hosts)
        # the same per-host outcome and the same ok/changed counts as the local run (the
        # tasks run once per batch aside, which each node's batch ran on its own host)
        assert merged == counts(local)
        ran_once = {e.task for o in outcomes if o.final.result for e in o.final.result.events
                    if e.task in ONCE_PER_BATCH and e.status == "ok"}
        assert "Find the control planes that hold the cluster (admin.conf and the kubeadm " \
            "mark)" in ran_once
        assert sum(c[1] for c in merged.values()) > 0
        assert all(lost is None for _, _, lost in attempts)

        # `provision doctor`: both nodes fit (the lab's versions are the controller's)
        doc = provision("doctor", str(site), "--json")
        assert doc.returncode == 0, doc.stdout + doc.stderr
        report = json.loads(doc.stdout)
        assert [(n["node"], n["ok"]) for n in report["nodes"]] == [("ex1", True), ("ex2", True)]

        # ex1 killed by PID at its first task event (same hosts, second run of site.yml):
        # its share, and only its share, runs again on ex2 with the reason recorded; ex2's
        # own share finishes undisturbed
        killed: list[int] = []
        ex1_hosts = set(outcomes[0].hosts)

        def on_event(ev: runner.TaskEvent) -> None:
            if ev.host in ex1_hosts and not killed:
                killed.extend(lab_execution.kill(state.execution_hosts, "ex1"))

        attempts.clear()
        second = dispatch.run_batch(ex, {}, out, "site.yml", RUN, idempotent=True,
                                    on_event=on_event,
                                    record=lambda a, n: attempts.append((a.worker, n, a.lost)))
        assert killed
        lost = [a for a in attempts if a[2] is not None]
        assert [(w, n) for w, n, _ in lost] == [("ex1", 1)]
        assert "execution node ex1 (10.250.0.201) lost" in str(lost[0][2])
        assert second[0].hosts == outcomes[0].hosts
        assert [a.worker for a in second[0].attempts] == ["ex1", "ex2"]
        assert second[0].final.result is not None and second[0].final.result.ok
        assert set(second[0].final.result.hosts) == ex1_hosts
        assert [a.worker for a in second[1].attempts] == ["ex2"]
        assert second[1].final.result is not None and second[1].final.result.ok
        assert set(second[1].final.result.hosts) == set(outcomes[1].hosts)

        # ex1 is now dead: doctor says so, naming it; a playbook not safe to repeat fails
        # exactly ex1's hosts with ssh's reason, not retried, and ex2's hosts run
        health = {h.node: h for h in doctor_mod.check(ex)}
        assert health["ex2"].ok and not health["ex1"].reachable
        assert health["ex1"].problems[0].startswith("SSH to root@10.250.0.201:22 failed")
        third = dispatch.run_batch(ex, {}, out, "ping.yml", sorted(HOSTS), idempotent=False)
        gone, ran = third
        assert len(gone.attempts) == 1 and gone.final.result is None
        assert gone.final.worker == "ex1" and len(gone.hosts) == 3
        assert "execution node ex1 (10.250.0.201) lost: ssh exited 255" in str(gone.final.lost)
        assert ran.final.worker == "ex2" and ran.final.result is not None and ran.final.result.ok
        assert set(ran.final.result.hosts) == set(ran.hosts)
        assert set(gone.hosts) | set(ran.hosts) == HOSTS and not set(gone.hosts) & set(ran.hosts)
    finally:
        lab_mod.down(load(site))


def assert_installed_from_the_wheelhouse(state: lab_mod.LabState, ex) -> None:
    """Each node's ansible-core and ansible-runner are the controller's versions, installed
    by pip from the lab mirror's wheels (pip's own report: URL and sha256 of every wheel),
    in the node's own venv; the controller's environment is not visible in the node."""
    house = Path(state.mirror["wheelhouse"])
    assert state.mirror["wheels_install_s"] > 0
    wheels_url = state.mirror["url"] + "wheels/"
    for h, node in zip(state.execution_hosts, ex.nodes, strict=True):
        assert node.ansible_runner == "/opt/provisioner/venv/bin/ansible-runner"
        report = json.loads((Path(h.upper) / wheelhouse.REPORT.lstrip("/")).read_text())
        got = {i["metadata"]["name"]: i for i in report["install"]}
        for name in ("ansible-core", "ansible-runner", "pip"):
            assert got[name]["metadata"]["version"] == version(name), name
        assert {"jinja2", "pyyaml", "pexpect"} <= {n.lower() for n in got}
        for item in got.values():
            url = item["download_info"]["url"]
            assert url.startswith(wheels_url), url
            wheel = (house / url.rsplit("/", 1)[1]).read_bytes()
            assert item["download_info"]["archive_info"]["hashes"]["sha256"] == \
                hashlib.sha256(wheel).hexdigest()
        probe = subprocess.run(
            ssh_argv(node, ex, "/opt/provisioner/venv/bin/ansible --version; "
                     f"test -e {sys.prefix}/bin/ansible-runner && echo CONTROLLER-VISIBLE"),
            capture_output=True, text=True, check=False)
        assert probe.returncode == 1, probe.stdout + probe.stderr  # `test` failed: not seen
        assert f"[core {version('ansible-core')}]" in probe.stdout
        assert ("ansible python module location = /opt/provisioner/venv/lib/python3."
                in probe.stdout), probe.stdout
        assert "CONTROLLER-VISIBLE" not in probe.stdout
