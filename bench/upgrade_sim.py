"""How close is `upgrade plan`'s schedule to the best possible one?

For a simulated site of 1,000 nodes (3 control planes, the rest GPU workers in racks, each
rack a failure domain) and the plan's per-step durations (provisioner.upgrade.plan.
Durations: cordon, drain, roles, reboot, gate, uncordon), lays the batches out with the
same scheduler `upgrade apply` picks them with, for both kinds of bundle side by side in
this one run: a GPU-stack bundle (driver, CUDA, DOCA, DCGM, containerd: no Kubernetes
change, so worker batches go alongside the control-plane rounds) and one that also moves
Kubernetes (each control plane's kubeadm upgrade in place first, one at a time, then the
same rounds: no kubelet is ever newer than an API server). It prints:

- planned total time (batches one after the other, each as long as its slowest node);
- the lower bound ceil(N / max_unavailable) x per-node time, max_unavailable being the sum
  of the per-rack limits (no schedule can have more nodes down at once);
- their ratio (goal <= 1.1), and the ratio to the bound that also counts the rules (no
  rack past its limit: max over racks of ceil(rack size / rack limit) rounds; control
  planes one at a time; every API server moved before any kubelet when Kubernetes
  changes), which no schedule beats.

    python bench/upgrade_sim.py [--nodes 1000] [--smoke]

--smoke: 100 nodes, to see that the bench still runs end to end.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter

from provisioner.upgrade.plan import Durations
from provisioner.upgrade.schedule import Scheduler, lower_bound_s, planned_s

CONTROL_PLANES = 3


def site(nodes: int, racks: list[int]) -> tuple[dict[str, str], frozenset[str]]:
    """Hosts -> rack, for `nodes` nodes spread over racks of the given relative sizes."""
    workers = nodes - CONTROL_PLANES
    total = sum(racks)
    sizes = [workers * r // total for r in racks]
    for i in range(workers - sum(sizes)):  # the remainder, one more node per rack
        sizes[i] += 1
    domains = {f"cp{i:02d}": f"cprack{i}" for i in range(1, CONTROL_PLANES + 1)}
    for r, size in enumerate(sizes):
        domains |= {f"r{r:02d}n{i:03d}": f"r{r:02d}" for i in range(size)}
    return domains, frozenset(h for h in domains if h.startswith("cp"))


def run(name: str, nodes: int, racks: list[int], max_unavailable: int | str,
        batch: int | str, kube: bool) -> None:
    domains, cps = site(nodes, racks)
    sched = Scheduler(domains, cps, batch=batch, max_unavailable=max_unavailable,
                      workers_wait=kube)
    d = Durations()
    node_s = {h: d.node_s(reboot=h not in cps) for h in domains}  # driver change on GPUs
    t0 = time.perf_counter()
    first, layout = sched.layout_in_place(list(domains))  # as make_plan lays it out
    took_s = time.perf_counter() - t0
    assert sum(len(b) for b in layout) == nodes, "every node is scheduled"
    assert all(sum(h in cps for h in b) <= 1 for b in layout), "one control plane at a time"
    assert bool(first) == kube, "control planes first, in place, when Kubernetes moves"
    in_place_s = len(first) * d.kubeadm_s
    planned = in_place_s + planned_s(layout, node_s)
    limits = sched.domain_limits()
    racks_ = {d for h, d in domains.items() if h not in cps}
    workers = nodes - len(cps)
    # Nodes the rule lets down at once: the racks' limits, capped by the batch size.
    unavailable = min(sum(limits[d] for d in racks_), sched.worker_batch_size(workers))
    per_node_s = max(node_s.values())
    bound = lower_bound_s(nodes, unavailable, per_node_s)  # the bound
    # What the rules themselves cost and no schedule avoids: no rack past its limit, the
    # control planes one at a time, and when Kubernetes changes every API server moved
    # (kubeadm, one control plane at a time) before any kubelet.
    sizes = Counter(d for h, d in domains.items() if h not in cps)
    rack_rounds = [math.ceil(n / limits[d]) for d, n in sizes.items()]
    rounds = max([math.ceil(workers / unavailable), *rack_rounds])
    cp_s = sum(node_s[h] for h in cps)
    rule_bound = (len(cps) * d.kubeadm_s if kube else 0.0) + max(cp_s, rounds * per_node_s)
    print(f"{name:<38} {'+k8s' if kube else 'gpu':>5} {len(racks_):>5} "
          f"{max_unavailable!s:>5} {unavailable:>5} {len(layout):>7} {planned / 3600:>7.2f} "
          f"{bound / 3600:>7.2f} {planned / bound:>6.3f} {planned / rule_bound:>7.3f} "
          f"{took_s * 1000:>6.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--smoke", action="store_true", help="100 nodes")
    args = ap.parse_args()
    n = 100 if args.smoke else args.nodes
    print(f"per-node time: {Durations().node_s(True):.0f} s with a reboot, "
          f"{Durations().node_s(False):.0f} s without (control planes)")
    print(f"{n} nodes; bundle 'gpu': driver/CUDA/DOCA/DCGM/containerd (workers alongside "
          "the control planes); '+k8s': the same and Kubernetes (each control plane's "
          f"kubeadm upgrade in place first, {Durations().kubeadm_s:.0f} s each)")
    print(f"{'scenario':<38} {'bundle':>5} {'racks':>5} {'maxU':>5} {'U':>5} "
          f"{'batches':>7} {'plan_h':>7} {'bound_h':>7} {'ratio':>6} {'r_rules':>7} "
          f"{'lay_ms':>6}")
    scenarios: list[tuple[str, list[int], int | str, int | str]] = [
        ("32 equal racks, 1 per rack", [1] * 32, 1, "100%"),
        ("64 equal racks, 1 per rack, batch 32", [1] * 64, 1, 32),
        ("32 equal racks, 2 per rack", [1] * 32, 2, "100%"),
        ("32 equal racks, 10% per rack", [1] * 32, "10%", "100%"),
        ("20 equal racks, 5 per rack", [1] * 20, 5, "100%"),
        ("uneven racks (1x..2x), 2 per rack", [1, 2] * 16, 2, "100%"),
    ]
    for name, racks, max_unavailable, batch in scenarios:
        for kube in (False, True):
            run(name, n, racks, max_unavailable, batch, kube)


if __name__ == "__main__":
    main()
