"""Which nodes an upgrade takes down next: control planes one at a time and never below
etcd quorum; workers in batches of at most `--batch`; at most `--max-unavailable` nodes of
one failure domain (a rack, or the value of a node label) down at once, control planes
included.

When the bundle changes Kubernetes, workers wait until every control plane is done: a
kubelet is never newer than the API server (Kubernetes "Version Skew Policy",
kubernetes.io/releases/version-skew-policy/), and a control plane that failed may still
serve the old version, so workers then wait for good. `control_planes_first` names the
control planes that instead move their API servers in place before any batch (kubeadm's
upgrade, workflows.upgrade.rolling); once they have, the run lifts the wait. When it changes no
Kubernetes version (a driver, CUDA, DOCA, DCGM or containerd bundle: the common GPU
upgrade), nothing orders workers after control planes, and each control-plane round
carries a worker batch with it.

"Down" counts every node that is not serving: the batch in flight, nodes a failed gate
left cordoned, and nodes the cluster reports unschedulable (cordoned by hand for
maintenance: `apply` leaves those alone) or not Ready; a pending node that is not Ready
takes nothing more from its domain when upgraded. The next batch is chosen only after the last
one finished, from what is down *then*, so a failed node keeps using its domain's
allowance and the limit is never exceeded.
Pure functions: `plan` uses them to lay out the batches and the planned time, `apply` to
pick each batch, and bench/upgrade_sim.py to measure how close the plan is to the bound.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from provisioner.errors import ConfigError
from provisioner.workflows.engine import batch_size


def quorum(members: int) -> int:
    """etcd's quorum: a majority of the members (stacked control planes, kubeadm)."""
    return members // 2 + 1


def limit_of(spec: int | str, total: int) -> int:
    """A number, or 'P%' of `total` (rounded down, at least one), as `--batch` reads it."""
    try:
        return batch_size(spec, total)
    except ConfigError as exc:
        raise ConfigError(exc.message.replace("batch size", "limit"), hint=exc.hint) from None


@dataclass(frozen=True)
class Scheduler:
    """The batch rule of one run. `domains` maps every host to its failure domain."""

    domains: Mapping[str, str]
    control_planes: frozenset[str]
    batch: int | str = "10%"
    max_unavailable: int | str = 1
    # The bundle changes Kubernetes: workers start only once every control plane is done.
    workers_wait: bool = True

    def control_planes_first(self, todo: Sequence[str], down: Collection[str] = ()
                             ) -> list[str]:
        """The control planes of `todo` that run kubeadm's upgrade in place, one at a time,
        before any batch: when the bundle changes Kubernetes (`workers_wait`), a worker is
        to be upgraded too, and no control plane is `down` (failed or part-way: it may
        serve the old version, and its round comes first). Else none: workers wait."""
        first = [h for h in todo if h in self.control_planes]
        if (self.workers_wait and first and any(h not in self.control_planes for h in todo)
                and not self.control_planes & set(down)):
            return first
        return []

    def layout_in_place(self, todo: Sequence[str], down: Collection[str] = (),
                        resumed: Collection[str] = ()) -> tuple[list[str], list[list[str]]]:
        """The plan's view of a run (plan and the bench): the control planes moved in place
        first, as apply tries them once the `resumed` nodes are back (assumed to pass), and
        every batch after, the workers' wait lifted when they moved (workflows.upgrade.rolling)."""
        first = self.control_planes_first([h for h in todo if h not in set(resumed)], down)
        sched = dataclasses.replace(self, workers_wait=False) if first else self
        return first, sched.layout(todo)

    def domain_limits(self) -> dict[str, int]:
        sizes = Counter(self.domains.values())
        return {d: limit_of(self.max_unavailable, n) for d, n in sizes.items()}

    def worker_batch_size(self, workers: int) -> int:
        return limit_of(self.batch, max(1, workers))

    def cp_allowed(self, down: Collection[str]) -> bool:
        """May one more control plane go down? Never below quorum with three or more; with
        one or two (no quorum to keep), only when none is down."""
        total = len(self.control_planes)
        cp_down = sum(1 for h in down if h in self.control_planes)
        if total >= 3:
            return total - cp_down - 1 >= quorum(total)
        return cp_down == 0

    def next_batch(self, pending: Sequence[str], down: Collection[str],
                   workers_total: int | None = None,
                   unfinished: Collection[str] | None = None,
                   etcd_down: Collection[str] | None = None) -> list[str]:
        """The next batch from `pending` given the hosts `down` now (not in `pending`): at
        most one control plane, and workers unless they must wait for the control planes
        (`workers_wait`). Empty when nothing may go down now (`why_none` says why).
        `unfinished`: the hosts down because this upgrade has not finished them (default:
        all of `down`); a control plane down for another reason (cordoned by hand) uses its
        domain's allowance, but says nothing of the API server's version. `etcd_down`: the
        hosts whose etcd member may be down (default: all of `down`; a control plane an
        operator only cordoned still serves etcd)."""
        limits = self.domain_limits()
        used = Counter(self.domains[h] for h in down if h in self.domains)
        # A pending node that is down already (NotReady) takes nothing more from its
        # domain when it is upgraded; quorum is still checked as if it went down now (a
        # NotReady control plane's etcd member may still be serving).
        already = set(down)
        etcd = set(down if etcd_down is None else etcd_down)
        batch: list[str] = []
        if any(h in self.control_planes for h in pending):
            for h in pending:
                if h not in self.control_planes:
                    continue
                d = self.domains[h]
                if self.cp_allowed(etcd - {h}) and (h in already or used[d] < limits[d]):
                    batch.append(h)
                    used[d] += h not in already
                    break
            if self.workers_wait:
                return batch
        elif self.workers_wait and any(h in self.control_planes
                                       for h in (down if unfinished is None else unfinished)):
            return []  # a failed control plane may still serve the old API version
        workers = [h for h in pending if h not in self.control_planes]
        total = workers_total if workers_total is not None else len(workers)
        size = self.worker_batch_size(total)
        # Domains with the most rounds of work left go first: the critical path ends last.
        left = Counter(self.domains[h] for h in workers)
        order = sorted(workers, key=lambda h: (-math.ceil(left[self.domains[h]]
                                                          / limits[self.domains[h]]),
                                               self.domains[h]))
        taken = 0
        for h in order:
            if taken >= size:
                break
            d = self.domains[h]
            if h in already or used[d] < limits[d]:
                batch.append(h)
                used[d] += h not in already
                taken += 1
        return batch

    def why_none(self, pending: Sequence[str], down: Collection[str],
                 unfinished: Collection[str] | None = None,
                 etcd_down: Collection[str] | None = None) -> str:
        """Why `next_batch` is empty: what a stopped run reports."""
        etcd = set(down if etcd_down is None else etcd_down)
        cps_down = sorted(h for h in etcd if h in self.control_planes)
        waiting_on = sorted(h for h in (down if unfinished is None else unfinished)
                            if h in self.control_planes)
        if self.workers_wait and waiting_on and not any(h in self.control_planes
                                                        for h in pending):
            return ("workers wait for every control plane (the bundle changes Kubernetes "
                    "and a kubelet is never newer than the API server): "
                    f"{', '.join(waiting_on)} did not finish")
        if any(h in self.control_planes for h in pending) and not self.cp_allowed(etcd):
            return (f"no control plane may go down: {', '.join(cps_down)} already down "
                    "(etcd quorum); " + (
                        "workers wait for every control plane (the bundle changes "
                        "Kubernetes)" if self.workers_wait else
                        "no worker may go down without exceeding --max-unavailable"))
        return "no node may go down now without exceeding --max-unavailable"

    def layout(self, hosts: Sequence[str], down: Collection[str] = ()) -> list[list[str]]:
        """Every batch in order, assuming every node passes (the plan's view)."""
        pending = list(hosts)
        workers_total = sum(1 for h in hosts if h not in self.control_planes)
        out: list[list[str]] = []
        while pending:
            batch = self.next_batch(pending, down, workers_total)
            if not batch:
                break
            out.append(batch)
            taken = set(batch)
            pending = [h for h in pending if h not in taken]
        return out


def planned_s(batches: Sequence[Sequence[str]], node_s: Mapping[str, float]) -> float:
    """Batches run one after the other; a batch lasts as long as its slowest node."""
    return sum(max(node_s[h] for h in b) for b in batches if b)


def lower_bound_s(n_nodes: int, max_unavailable_total: int, per_node_s: float) -> float:
    """No schedule beats ceil(N / max_unavailable) rounds of one node's time."""
    return math.ceil(n_nodes / max(1, max_unavailable_total)) * per_node_s
