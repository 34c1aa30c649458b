"""The rolling logic of `upgrade apply` (workflows.upgrade.rolling on the engine's batch stage,
over a real state store) driven against a simulated cluster over many hypothesis scenarios: node
failures at random steps, slow drains, PDBs that never release. Invariants:

- the nodes of a failure domain cordoned at once never exceed --max-unavailable;
- control planes go one at a time (at most one in a batch) and, with three or more, never
  below etcd quorum;
- when the bundle changes Kubernetes, no worker's kubelet is upgraded while any API server
  is still on the old version (a control plane not yet upgraded, in place or in its round,
  or one whose upgrade failed); when it does not, workers may go alongside the control
  planes;
- a node that failed is never uncordoned (it stays cordoned);
- no batch starts once the failure budget is spent, and a run that did not try every node
  stopped for the budget, for --max-unavailable or quorum, or because workers wait for a
  failed control plane, and said which.

max_examples is 150 per run (about 3 s on the 2-core machine; each scenario starts from a
copy of one ready store), the count it ran at while every fix to the rolling logic that it
checks landed (the commits from the simulation's first to the control planes' in-place
step); 2,000 under HYPOTHESIS_PROFILE=thorough. Hypothesis draws new scenarios on every run
and tries the failing ones kept in tests/hypothesis-db/ first (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.errors import KubeError
from provisioner.kube import Down, Eviction, NodeHealth, PodRef
from provisioner.lifecycle import Phase
from provisioner.state import StateStore
from provisioner.upgrade.schedule import Scheduler
from provisioner.workflows.engine import Journal
from provisioner.workflows.upgrade import rolling
from provisioner.workflows.upgrade.rolling import DrainOptions, Rolling, roll
from provisioner.workflows.upgrade.steps import Clock
from tests.conftest import examples, moved_to

# kubeadm: its kubeadm upgrade fails, in place (a control plane) and in its round
FATES = ("ok", "ok", "ok", "slow_drain", "cordon", "drain_blocked", "install", "not_ready",
         "host_gate", "kubeadm")
FAILING = ("cordon", "drain_blocked", "install", "not_ready", "host_gate", "kubeadm")
DRAIN_TIMEOUT_S = 50.0
SHM = "/dev/shm" if Path("/dev/shm").is_dir() else None
RETRY_S = 10.0


class Violation(AssertionError):
    pass


class SimCluster:
    """A KubeClient and an Installer over one simulated cluster that checks the invariants
    whenever a node is cordoned or uncordoned."""

    def __init__(self, fates: dict[str, str], domains: dict[str, str], limits: dict[str, int],
                 cps: set[str], kube: bool = True) -> None:
        self.fates, self.domains, self.limits, self.cps = fates, domains, limits, cps
        self.kube = kube  # the bundle changes Kubernetes
        self.api_new: set[str] = set()  # control planes whose API server is on the bundle
        self.in_place: list[str] = []  # control planes upgraded in place, in order
        self.cordoned: set[str] = set()
        self.failed: set[str] = set()
        self.tries: Counter[str] = Counter()
        self.evicted: set[str] = set()  # nodes whose job pod was evicted or deleted
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def _check(self) -> None:
        per = Counter(self.domains[h] for h in self.cordoned)
        for d, n in per.items():
            if n > self.limits[d]:
                self.errors.append(f"{n} cordoned in {d}, limit {self.limits[d]}")
        cp_down = len(self.cordoned & self.cps)
        total = len(self.cps)
        if (total >= 3 and total - cp_down < total // 2 + 1) or (total < 3 and cp_down > 1):
            self.errors.append(f"{cp_down} of {total} control planes down")

    # KubeClient
    def cordon(self, node: str) -> None:
        with self.lock:
            if self.fates[node] == "cordon":
                self.failed.add(node)
                raise KubeError(f"cordon {node}: the API server answered 500", status=500)
            self.cordoned.add(node)
            self._check()

    def uncordon(self, node: str) -> None:
        with self.lock:
            if node in self.failed:
                self.errors.append(f"failed node {node} uncordoned")
            self.cordoned.discard(node)

    def pods_on(self, node: str) -> list[PodRef]:
        pods = [PodRef("kube-system", f"{node}-ds", "DaemonSet")]
        if self.fates[node] in ("slow_drain", "drain_blocked") and node not in self.evicted:
            pods.append(PodRef("train", f"{node}-job", "Job"))
        return pods

    def evict(self, pod: PodRef, grace_s: int | None = None) -> Eviction:
        node = pod.name.rsplit("-", 1)[0]
        with self.lock:
            self.tries[node] += 1
            tries = self.tries[node]
        if pod.owner_kind == "DaemonSet":
            self.errors.append(f"DaemonSet pod {pod} evicted")
        if self.fates[node] == "drain_blocked" or (self.fates[node] == "slow_drain"
                                                    and tries < 3):
            return Eviction.BLOCKED
        with self.lock:
            self.evicted.add(node)
        return Eviction.EVICTED

    def delete(self, pod: PodRef) -> None:
        with self.lock:
            self.evicted.add(pod.name.rsplit("-", 1)[0])

    def unavailable(self) -> dict[str, Down]:
        with self.lock:  # the sim's cordons are all this run's own: already counted down
            return dict.fromkeys(self.cordoned, Down.CORDONED)

    def health(self, node: str) -> NodeHealth:
        return NodeHealth(ready=self.fates[node] != "not_ready", unschedulable=True,
                          allocatable_gpus=8, kubelet_version="v1.36.4")

    def pdbs(self) -> list[str]:
        return ["train/jobs"]

    # Installer
    def install(self, batch: Any, reboot: Any) -> dict[str, str | None]:
        broken = ("install", "kubeadm")
        with self.lock:
            old_apis = sorted(self.cps - self.api_new)
            for h in batch:
                if self.kube and h not in self.cps and old_apis:
                    self.errors.append(f"{h}: kubelet upgraded while API server(s) "
                                       f"{old_apis} are on the old version")
            self.api_new |= {h for h in batch if h in self.cps and self.fates[h] not in broken}
        return {h: "dpkg failed" if self.fates[h] in broken else None for h in batch}

    def control_plane_first(self, host: str) -> str | None:
        with self.lock:
            if host not in self.cps or not self.kube:
                self.errors.append(f"{host}: upgraded in place, not a control plane of a "
                                   "Kubernetes move")
            self.in_place.append(host)
            if self.fates[host] == "kubeadm":
                return "kubeadm upgrade apply: etcd did not come back"
            self.api_new.add(host)
        return None

    def gate(self, batch: Any) -> dict[str, str | None]:
        return {h: "nvidia-smi: 7 GPUs" if self.fates[h] == "host_gate" else None
                for h in batch}


def virtual_clock() -> Clock:
    """Per-thread virtual time: a drain's retries cost nothing real."""
    local = threading.local()

    def now() -> float:
        return float(getattr(local, "t", 0.0))

    def sleep(s: float) -> bool:
        local.t = now() + s
        return False

    return Clock(now=now, sleep=sleep)


def limit(spec: int | str, size: int) -> int:
    if isinstance(spec, str):
        return max(1, math.floor(size * int(spec[:-1]) / 100))
    return spec


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    racks = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 7)) for _ in range(racks)]
    hosts = [f"r{r}n{i}" for r in range(racks) for i in range(sizes[r])]
    n_cp = draw(st.sampled_from([0, 1, 2, 3, 5]))
    cps = set(hosts[:: max(1, len(hosts) // max(1, n_cp))][:n_cp]) if n_cp else set()
    return {
        "hosts": hosts,
        "domains": {h: h.split("n")[0] for h in hosts},
        "cps": cps,
        "fates": {h: draw(st.sampled_from(FATES)) for h in hosts},
        "max_unavailable": draw(st.one_of(st.integers(1, 3),
                                          st.sampled_from(["10%", "25%", "50%"]))),
        "batch": draw(st.one_of(st.integers(1, 6), st.sampled_from(["50%", "100%"]))),
        "max_failures": draw(st.integers(1, 4)),
        "fallback": draw(st.booleans()),
        "kube": draw(st.booleans()),  # the bundle changes Kubernetes: workers wait
    }


def ready_store(path: Path, hosts: list[str]) -> StateStore:
    store = StateStore(path)
    moved_to(store, hosts, Phase.READY)
    return store


ALL_HOSTS = [f"r{r}n{i}" for r in range(4) for i in range(7)]  # every host a scenario draws
_TEMPLATE: list[Path] = []


def ready_copy(path: Path) -> StateStore:
    """A store with every possible host ready, copied from one built once: building it per
    scenario (enroll and six moves per host) was most of the test's time. Hosts a scenario
    does not use stay ready and untouched."""
    if not _TEMPLATE:
        tmp = Path(tempfile.mkdtemp(dir=SHM))
        ready_store(tmp / "state.db", ALL_HOSTS)
        _TEMPLATE.append(tmp)
    for f in _TEMPLATE[0].iterdir():
        if f.name.startswith("state.db"):
            shutil.copyfile(f, path.parent / f.name)
    return StateStore(path)


@settings(max_examples=examples(found=150, thorough=2000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios())
def test_rolling_upgrade_invariants(sc: dict[str, Any]) -> None:
    hosts, domains, cps, fates = sc["hosts"], sc["domains"], sc["cps"], sc["fates"]
    sizes = Counter(domains.values())
    limits = {d: limit(sc["max_unavailable"], n) for d, n in sizes.items()}
    sim = SimCluster(fates, domains, limits, cps, sc["kube"])  # a PDB blocks regardless
    if sc["fallback"]:  # the operator allowed deleting blocked pods: the drain goes through
        fates = {h: ("ok" if f == "drain_blocked" else f) for h, f in fates.items()}
    with tempfile.TemporaryDirectory(dir=SHM) as tmp:
        store = ready_copy(Path(tmp) / "state.db")
        run_id = store.start_run("upgrade apply (simulated)")
        journal = Journal(store, run_id, None)
        journal.load(hosts)
        sched = Scheduler(domains, frozenset(cps), sc["batch"], sc["max_unavailable"],
                          workers_wait=sc["kube"])
        r = Rolling(journal, sim, sim, sched, hosts, frozenset(), {h: 8 for h in hosts},
                    sc["max_failures"], DrainOptions(DRAIN_TIMEOUT_S, RETRY_S, sc["fallback"]),
                    virtual_clock())
        starts: list[tuple[list[str], int]] = []
        real_batch = rolling.run_batch

        def watched(r_: Rolling, batch: list[str], stop: threading.Event) -> None:
            starts.append((list(batch), sum(journal.phase(h) is Phase.FAILED for h in hosts)))
            real_batch(r_, batch, stop)

        with mock.patch.object(rolling, "run_batch", watched):
            out = roll(r, hosts, threading.Event())
        assert not sim.errors, sim.errors
        # in place: every control plane in turn when Kubernetes moves and workers wait for
        # them, up to the first that fails (the rest then go alone first, in their rounds)
        order = [h for h in hosts if h in cps]
        broke = [i for i, h in enumerate(order) if sc["fates"][h] == "kubeadm"]
        if sc["kube"] and order and len(order) < len(hosts):
            assert sim.in_place == order[:broke[0] + 1 if broke else None], sim.in_place
        else:
            assert sim.in_place == []
        should_fail = {h for h, f in fates.items() if f in FAILING}
        attempted = {h for b, _ in starts for h in b}
        for h in hosts:
            phase = journal.phase(h)
            if h not in attempted:
                assert phase is Phase.READY and not journal.outcomes[h].steps
            elif h in should_fail:
                assert phase is Phase.FAILED, (h, fates[h], phase)
                if fates[h] != "cordon":
                    assert h in sim.cordoned  # a failed node stays cordoned
            else:
                assert phase is Phase.READY, (h, fates[h], phase, journal.outcomes[h].reason)
                assert h not in sim.cordoned
        for batch, failed_before in starts:  # no batch after the budget was spent
            assert failed_before < sc["max_failures"], (batch, failed_before)
            assert sum(h in cps for h in batch) <= 1, batch  # one control plane at a time
        failed = [h for h in hosts if journal.phase(h) is Phase.FAILED]
        assert sorted(out.failed) == sorted(failed)
        if attempted != set(hosts):
            assert out.stopped is not None
            if len(failed) >= sc["max_failures"]:
                assert out.stopped.startswith("failure budget spent")
            elif out.stopped.startswith("workers wait for every control plane"):
                assert sc["kube"] and set(failed) & cps, out.stopped
            else:
                assert "max-unavailable" in out.stopped or "etcd quorum" in out.stopped, \
                    out.stopped
        else:
            assert out.stopped is None
        # spent: the budget stopped the run with nodes left (failures in the last batch
        # that end it anyway are not a stop)
        assert out.budget_spent == (len(failed) >= sc["max_failures"]
                                    and attempted != set(hosts))
        fallbacks = [e for e in store.events() if e.kind == "drain_fallback"]
        if sc["fallback"]:
            assert len(fallbacks) == sum(1 for h in attempted
                                         if sc["fates"][h] == "drain_blocked")
        else:
            assert not fallbacks


def test_a_pdb_that_never_releases_fails_the_node_and_it_stays_cordoned() -> None:
    """One fixed scenario, readable: three workers in one rack, max-unavailable 1."""
    hosts = ["w1", "w2", "w3"]
    fates = {"w1": "ok", "w2": "drain_blocked", "w3": "ok"}
    sim = SimCluster(fates, dict.fromkeys(hosts, "r1"), {"r1": 1}, set())
    with tempfile.TemporaryDirectory() as tmp:
        store = ready_store(Path(tmp) / "state.db", hosts)
        journal = Journal(store, store.start_run("sim"), None)
        journal.load(hosts)
        r = Rolling(journal, sim, sim, Scheduler(dict.fromkeys(hosts, "r1"), frozenset(),
                                                 1, 1),
                    hosts, frozenset(), {}, 2, DrainOptions(DRAIN_TIMEOUT_S, RETRY_S),
                    virtual_clock())
        out = roll(r, hosts, threading.Event())
        # w2 failed and holds the rack's only slot: w3 may not go down.
        assert journal.phase("w1") is Phase.READY and journal.phase("w2") is Phase.FAILED
        assert "PodDisruptionBudget" in (journal.outcomes["w2"].reason or "")
        assert journal.phase("w3") is Phase.READY and out.not_started == ["w3"]
        assert out.stopped and "max-unavailable" in out.stopped
        assert sim.cordoned == {"w2"} and sim.tries["w2"] == 1 + DRAIN_TIMEOUT_S / RETRY_S


def test_no_control_plane_moves_in_place_once_the_budget_is_spent() -> None:
    """A killed run left w1 part-way; resumed first, it fails and spends the budget of 1:
    the run stops there, and no kubeadm moves the cluster (it cannot be taken back)."""
    cps = {"c1", "c2", "c3"}
    hosts = ["c1", "c2", "c3", "w1", "w2"]
    fates = dict.fromkeys(hosts, "ok") | {"w1": "install"}
    domains = dict.fromkeys(hosts, "r1")
    sim = SimCluster(fates, domains, {"r1": 2}, cps)
    with tempfile.TemporaryDirectory() as tmp:
        store = ready_store(Path(tmp) / "state.db", hosts)
        store.transition("w1", Phase.CORDONED)  # where the killed run left it
        journal = Journal(store, store.start_run("sim"), None)
        journal.load(hosts)
        r = Rolling(journal, sim, sim, Scheduler(domains, frozenset(cps), 2, 2), hosts,
                    frozenset(), {}, 1, DrainOptions(DRAIN_TIMEOUT_S, RETRY_S),
                    virtual_clock())
        out = roll(r, hosts, threading.Event())
        assert journal.phase("w1") is Phase.FAILED and out.budget_spent
        assert sim.in_place == [] and sim.api_new == set()
    # with budget left (a budget of 2), the same run moves every control plane in place
    sim = SimCluster(fates, domains, {"r1": 2}, cps)
    with tempfile.TemporaryDirectory() as tmp:
        store = ready_store(Path(tmp) / "state.db", hosts)
        store.transition("w1", Phase.CORDONED)
        journal = Journal(store, store.start_run("sim"), None)
        journal.load(hosts)
        out = roll(dataclasses.replace(r, journal=journal, kube=sim, installer=sim,
                                       max_failures=2), hosts, threading.Event())
        assert sim.in_place == ["c1", "c2", "c3"] and not out.budget_spent
        assert sorted(out.failed) == ["w1"] and out.stopped is None
