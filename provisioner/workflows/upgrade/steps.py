"""The Kubernetes-side steps of a rolling upgrade, on the engine's NodeStep protocol:
cordon, drain (evictions that respect PodDisruptionBudgets), the health gate's cluster
checks, uncordon. The host side (packages, reboot, GPU checks) is `upgrade.host.Installer`.

Drain follows `kubectl drain`: DaemonSet and mirror (static) pods stay; every other pod is
evicted through policy/v1 Eviction, which the API server refuses with 429 while a PDB
allows no disruption, and the drain ends when the evicted pods are no longer listed (their
termination grace period is over), within the same timeout. Refused evictions are retried
until `drain_timeout_s`; then the node fails (stays cordoned), unless the operator allowed
the fallback (`--drain-fallback delete`), which deletes the remaining pods, bypassing the
PDB, and logs each one.

A server that is no Kubernetes node (a storage node: no control plane or worker role) goes
along the same phases with none of these calls: the cluster has no Node object for it (a
cordon would be answered 404), nothing to drain, nothing to gate on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.inventory.models import Role
from provisioner.inventory.topology import HostPlan
from provisioner.kube import Eviction, KubeClient, PodRef
from provisioner.lifecycle import Phase
from provisioner.workflows.engine import Journal, StepFailed, StepInterrupted


def in_kubernetes(plan: HostPlan) -> bool:
    """Whether the node is a Kubernetes node (a control plane or a worker: the rendered
    inventory's k8s_cluster). A storage node by default is not: no containerd or kubelet
    is installed there, and the cluster has no Node object to cordon (404)."""
    return Role.CONTROL_PLANE in plan.roles or Role.WORKER in plan.roles


def outside_kubernetes(hosts: Sequence[HostPlan]) -> frozenset[str]:
    """The servers an upgrade takes along its path without cordon, drain or the cluster's
    checks: they are no Kubernetes nodes."""
    return frozenset(h.hostname for h in hosts if not in_kubernetes(h))


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass
class Clock:
    """Time for the drain loop: real by default; the simulation passes a virtual one."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], bool] = _sleep  # True: a stop was requested meanwhile


@dataclass
class Cordon:
    """ready -> cordoned: no new pods land on the node."""

    kube: KubeClient
    bundle: str = ""  # recorded: a resumed run knows which bundle the node is moving to
    outside: Collection[str] = ()  # no Kubernetes nodes: nothing to cordon
    name: str = "cordon"
    source: Phase = Phase.READY

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        bundle = {"bundle": self.bundle} if self.bundle else {}
        if host in self.outside:
            return {"kubernetes": False, **bundle}
        self.kube.cordon(host)
        return {"unschedulable": True, **bundle}


@dataclass
class DrainBegin:
    """cordoned -> draining, committed before evictions start so a crash shows the truth."""

    name: str = "drain"
    source: Phase = Phase.CORDONED

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        return {"started": True}


@dataclass
class Drain:
    """draining -> upgrading: every evictable pod is gone (or the fallback deleted it)."""

    kube: KubeClient
    journal: Journal
    timeout_s: float = 600.0
    retry_s: float = 5.0
    fallback_delete: bool = False
    clock: Clock = field(default_factory=Clock)
    name: str = "drain"
    source: Phase = Phase.DRAINING
    force: bool = False  # --drain-force: evict pods no controller owns (kubectl's --force)
    delete_emptydir_data: bool = False  # --drain-delete-emptydir-data, as kubectl's
    outside: Collection[str] = ()  # no Kubernetes nodes: no pods to evict

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        if host in self.outside:
            return {"kubernetes": False, "evicted": 0}
        pods = [p for p in self.kube.pods_on(host)
                if p.owner_kind != "DaemonSet" and not p.mirror]
        self._refuse_what_kubectl_drain_would(pods)
        start = self.clock.now()
        evicted = blocked_tries = 0
        gone: list[PodRef] = []  # evicted or deleted: waited for until they are not listed
        while pods:
            left = []
            for pod in pods:
                outcome = self.kube.evict(pod)
                if outcome is Eviction.BLOCKED:
                    left.append(pod)
                else:
                    evicted += 1
                    gone.append(pod)
            pods = left
            if not pods:
                break
            blocked_tries += 1
            if self.clock.now() - start >= self.timeout_s:
                names = ", ".join(map(str, pods[:5])) + (" ..." if len(pods) > 5 else "")
                if not self.fallback_delete:
                    raise StepFailed(f"drain: {len(pods)} pod(s) still blocked by a "
                                     f"PodDisruptionBudget after {self.timeout_s:g} s "
                                     f"({names}); the node stays cordoned")
                for pod in pods:
                    self.kube.delete(pod)
                    self.journal.note(host, self.name, "drain_fallback",
                                      f"deleted {pod}: eviction blocked by a "
                                      f"PodDisruptionBudget for {self.timeout_s:g} s "
                                      "(--drain-fallback delete)")
                # the deleted pods get their own grace period, as kubectl drain gives them
                waited = self._until_gone(host, gone + pods, self.clock.now())
                return {"evicted": evicted, "deleted": len(pods), "blocked_tries": blocked_tries,
                        "terminating_polls": waited}
            if self.clock.sleep(self.retry_s):
                raise StepInterrupted
        waited = self._until_gone(host, gone, start)
        return {"evicted": evicted, "blocked_tries": blocked_tries, "terminating_polls": waited}

    def _refuse_what_kubectl_drain_would(self, pods: list[PodRef]) -> None:
        """kubectl drain evicts nothing while a pod would be lost for good (no controller
        recreates it) or would take its emptyDir data with it, unless told: at 3 a.m. a
        bare pod (an interactive GPU session) or a job's scratch space is someone's work."""
        live = [p for p in pods if not p.finished]
        refused = [f"{p} (no controller would recreate it: --drain-force)"
                   for p in live if p.unmanaged and not self.force]
        refused += [f"{p} (its emptyDir data goes with it: --drain-delete-emptydir-data)"
                    for p in live if p.local_storage and not self.delete_emptydir_data]
        if refused:
            shown = "; ".join(refused[:5]) + (" ..." if len(refused) > 5 else "")
            raise StepFailed(f"drain: {len(refused)} pod(s) kubectl drain would not evict "
                             f"without being told: {shown}; nothing was evicted and the "
                             "node stays cordoned. Move them, or pass the option named")

    def _until_gone(self, host: str, pods: list[PodRef], start: float) -> int:
        """Wait until the evicted pods have terminated (their grace period: a training job
        writing its checkpoint), as `kubectl drain` does: the roles then stop containerd and
        unload the driver under no workload. The polls it took."""
        want = {(p.namespace, p.name, p.uid) for p in pods}
        polls = 0
        while want:
            want &= {(p.namespace, p.name, p.uid) for p in self.kube.pods_on(host)}
            if not want:
                break
            polls += 1
            if self.clock.now() - start >= self.timeout_s:
                names = ", ".join(sorted(f"{ns}/{n}" for ns, n, _uid in want)[:5])
                raise StepFailed(f"drain: {len(want)} evicted pod(s) still terminating after "
                                 f"{self.timeout_s:g} s ({names}); the node stays cordoned")
            if self.clock.sleep(self.retry_s):
                raise StepInterrupted
        return polls


@dataclass
class Uncordon:
    """verified -> ready: the node takes pods again. Only a node that passed its gate gets
    here: a failed node is never uncordoned."""

    kube: KubeClient
    on_done: Callable[[str], None] = lambda _h: None
    outside: Collection[str] = ()  # no Kubernetes nodes: nothing to uncordon
    name: str = "uncordon"
    source: Phase = Phase.VERIFIED

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        if host in self.outside:
            self.on_done(host)
            return {"kubernetes": False}
        self.kube.uncordon(host)
        self.on_done(host)
        return {"unschedulable": False}


def cluster_gate(kube: KubeClient, host: str, gpus_expected: int,
                 kubernetes: str | None = None, control_plane: bool = False) -> list[str]:
    """The gate's cluster checks: node Ready, every GPU allocatable again, and where the
    bundle moves Kubernetes (`kubernetes`: "v1.32.4"), the version the node's kubelet
    reports and, on a control plane, the API server's: what the cluster says it runs, not
    only what apt installed."""
    health = kube.health(host)
    problems = []
    if not health.ready:
        problems.append("node is not Ready")
    if gpus_expected and health.allocatable_gpus < gpus_expected:
        problems.append(f"allocatable nvidia.com/gpu is {health.allocatable_gpus}, "
                        f"expected {gpus_expected}")
    if kubernetes and health.kubelet_version != kubernetes:
        problems.append(f"the kubelet reports {health.kubelet_version or 'no version'}, "
                        f"expected {kubernetes}")
    if kubernetes and control_plane:
        served = kube.apiserver_version(host)
        if served != kubernetes:
            problems.append(f"its API server (kube-system/kube-apiserver-{host}) runs "
                            f"{served or 'no version: no such pod'}, expected {kubernetes}")
    return problems
