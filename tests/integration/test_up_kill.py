"""`provision up` killed with SIGKILL at random points, and stopped with Ctrl-C: the state
store stays consistent, and the next run finishes every node without repeating a phase.

A three-node IPMI site (ipmi_sim powers on at once) with the trivial ping.yml playbook in
place of site.yml, so 12 kill points fit in under two minutes; the phases, the state store and
the resume logic are the same as for the full playbook.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner import leftovers
from provisioner.state import StateStore
from tests.conftest import FIXTURES, ROOT, requires_ssh_hosts
from tests.integration.conftest import forget_state, provision, requires_ipmi_sim, ssh_lab

pytestmark = [pytest.mark.integration, requires_ipmi_sim,
              requires_ssh_hosts]
NODES = {"n01", "n02", "n03"}
LIFECYCLE = ["inspected", "booting", "os_ready", "configured", "verified", "ready"]
KILL_POINTS = 12  # each a fresh run to a random point: about 9 s apiece on CI
# --reinstall: each fresh store finds the lab's nodes on and installed by the run before
TRIVIAL = ("--playbook", "ping.yml", "--verify-playbook", "ping.yml", "--reinstall", "*")


@pytest.fixture(scope="module")
def small_lab(tmp_path_factory):
    with ssh_lab(tmp_path_factory, FIXTURES / "sites" / "ipmi3", "kill") as (site, _):
        yield site


def fresh(site: Path) -> Path:
    return forget_state(site)


def start_up(site: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "provisioner", "up", str(site),
                             *TRIVIAL, "--json-events"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                            start_new_session=True)


def transitions(store: StateStore) -> list[tuple[int | None, str, str]]:
    return [(e.run_id, e.hostname or "", e.to_phase or "") for e in store.events()
            if e.kind == "transition"]


def resume_and_check(site: Path, db: Path, label: str) -> None:
    store = StateStore(db)
    assert store.check_consistency() == [], label
    before = {(h, p) for _, h, p in transitions(store)}
    proc = provision("up", str(site), *TRIVIAL, "--json", timeout=300)
    assert proc.returncode == 0, (label, proc.stdout[-2000:], proc.stderr[-2000:])
    doc = json.loads(proc.stdout)
    assert {n["hostname"]: n["phase"] for n in doc["nodes"]} == dict.fromkeys(NODES, "ready")
    resumed = [(h, p) for r, h, p in transitions(store) if r == doc["run_id"]]
    assert [t for t in resumed if t in before] == [], (label, resumed, before)
    for host in NODES:  # across both runs: every phase exactly once, in order
        assert [p for _, h, p in transitions(store) if h == host] == LIFECYCLE, (label, host)
    assert store.check_consistency() == []
    # no playbook a killed run started is still running against the nodes
    assert leftovers.orphaned_playbooks(db.parent) == [], label


def test_kill_9_at_random_points_then_resume(small_lab):
    site = small_lab
    seed = int(os.environ.get("PROVISION_TEST_SEED", time.time()))
    rng = random.Random(seed)
    db = fresh(site)
    t0 = time.monotonic()
    resume_and_check(site, db, "a full run")  # from nothing: also times a whole run
    full_s = time.monotonic() - t0
    kills = []
    for i in range(KILL_POINTS):
        db = fresh(site)
        proc = start_up(site)
        delay = rng.uniform(0.2, full_s)
        time.sleep(delay)
        finished = proc.poll() is not None
        if not finished:
            os.killpg(proc.pid, signal.SIGKILL)  # provision up and the playbook it runs
        proc.wait(timeout=60)
        # killed before it opened the store, or after: both must resume
        store = StateStore(db) if db.exists() else None
        phases = sorted(n.phase.value for n in store.nodes()) if store else []
        recorded = [r["id"] for r in store.runs() if r["status"] == "running"] if store else []
        kills.append((round(delay, 2), finished, phases))
        resume_and_check(site, db, f"seed {seed}, kill {i} at {delay:.2f} s")
        if not finished:  # the killed run, if it got as far as recording itself
            killed = [r["id"] for r in StateStore(db).runs() if r["status"] == "killed"]
            assert killed == recorded, (seed, i, StateStore(db).runs())
    # the kill points landed in different phases, not all before or after the work
    reached = {p for _, finished, phases in kills if not finished for p in phases}
    assert len(reached) >= 3, (seed, kills)


def _up_until(site: Path, step: str, signals: int) -> tuple[int, list[dict], dict, str]:
    """`provision up --json-events`, sent `signals` Ctrl-Cs (0.3 s apart) as soon as `step`
    starts; (exit code, the events after the first Ctrl-C, the result, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "up", str(site),
                             *TRIVIAL, "--json-events"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            text=True, start_new_session=True)
    assert proc.stdout is not None
    after: list[dict] = []
    sent = 0
    rest: list[str] = []
    for line in proc.stdout:
        if not line.startswith('{"schema": "provisioner.up-event'):
            rest.append(line)  # the result, one JSON document over many lines
        else:
            doc = json.loads(line)
            if sent:
                after.append(doc)
            elif doc.get("step") == step and doc.get("status") == "start":
                for i in range(signals):  # the playbook is starting: it is in flight
                    time.sleep(0.3 if i else 0)
                    proc.send_signal(signal.SIGINT)
                sent = signals
    err = proc.stderr.read() if proc.stderr else ""
    proc.wait(timeout=300)
    assert sent, err[-2000:]
    return proc.returncode, after, json.loads("".join(rest)), err


def test_ctrl_c_once_lets_the_playbook_finish_twice_cancels_it_both_resume(small_lab):
    """The first Ctrl-C while configure's playbook runs: the playbook runs to its end and
    every node is recorded configured (not interrupted), verify is not started, exit 130.
    The next run, Ctrl-C twice while verify's playbook runs: it is canceled, its nodes are
    recorded interrupted and stay configured, exit 130. A third run finishes the rest."""
    site = small_lab
    db = fresh(site)
    code, after, doc, err = _up_until(site, "configure", 1)
    assert code == 130, err[-2000:]
    assert "stopping: steps in flight finish" in err and "aborting" not in err
    assert doc["interrupted"] is True
    # the playbook's outcome arrived after the Ctrl-C: it was in flight, and it finished
    assert {e["node"] for e in after if e["step"] == "configure" and e["status"] == "ok"
            } == NODES
    assert not [e for e in after if e["step"] == "configure" and e["status"] == "interrupted"]
    store = StateStore(db)
    assert {n.hostname: n.phase.value for n in store.nodes()} == dict.fromkeys(
        NODES, "configured")
    assert store.runs()[0]["status"] == "interrupted"
    assert {e.detail["step"] for e in store.events() if e.kind == "interrupted"} == {"verify"}

    code, after, doc, err = _up_until(site, "verify", 2)
    assert code == 130, err[-2000:]
    assert "aborting: the playbook in flight is canceled" in err
    assert {e["node"] for e in after if e["step"] == "verify" and e["status"] == "interrupted"
            } == NODES
    assert {n.hostname: n.phase.value for n in store.nodes()} == dict.fromkeys(
        NODES, "configured")
    canceled = [e for e in store.events() if e.kind == "interrupted"
                and e.run_id == doc["run_id"]]
    assert {e.hostname for e in canceled} == NODES
    assert {e.detail["detail"] for e in canceled} == {"playbook canceled"}
    assert store.runs()[0]["status"] == "interrupted"
    resume_and_check(site, db, "after Ctrl-C once, then twice")


def test_ctrl_c_stops_cleanly_and_the_next_run_resumes(small_lab):
    site = small_lab
    db = fresh(site)
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "up", str(site),
                             *TRIVIAL, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            text=True, start_new_session=True)
    store = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # Ctrl-C once the first node is inspected
        if db.exists():
            store = StateStore(db)
            if any(e.to_phase == "os_ready" for e in store.events()):
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "stopping: steps in flight finish" in err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    assert store is not None
    assert store.runs()[0]["status"] == "interrupted"
    assert any(e.kind == "interrupted" for e in store.events())
    assert not any(n.phase.value == "ready" for n in store.nodes())
    resume_and_check(site, db, "after Ctrl-C")
