"""provision upgrade plan: check a bundle against the site and what the nodes run now, then
say what changes on which nodes, in which batches, and how long it should take.

Refusals (the run would break the cluster) come from the vendors' rules: CUDA needs a
minimum driver (CUDA release notes, Table 3), fabric manager and NSCQ equal the
driver (Fabric Manager user guide: FM refuses to start otherwise), open kernel modules need
Turing or newer, Kubernetes moves one minor at a time with the control plane first, and a
kubelet is never newer than the API server (kubernetes.io version-skew policy): when the
bundle changes Kubernetes, workers wait for every control plane; otherwise they go
alongside the control-plane rounds. The driver/CUDA/module rules are the site checks
(software_checks) run on the site as the bundle would leave it, so a rule is written once.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.errors import ConfigError
from provisioner.inventory import software_checks
from provisioner.inventory.bundle_models import Bundle
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import HostPlan
from provisioner.upgrade.plan_bundle import (
    Versions,
    bundle_driver,
    components_on,
    effective,
    modules_at,
    site_at,
    software_at,
)
from provisioner.upgrade.schedule import Scheduler, planned_s
from provisioner.workflows.upgrade.steps import outside_kubernetes

__all__ = ["Change", "Durations", "NodePlan", "PlanOptions", "Refusal", "UpgradePlan",
           "Versions", "components_on", "direction", "domain_of", "effective", "make_plan",
           "minor_of", "scheduler", "site_at", "software_at"]

CLUSTER_COMPONENTS = ("gpu_operator", "network_operator")  # charts: once, not per node
# A change to one of these loads a new kernel module: the node reboots.
REBOOT_COMPONENTS = frozenset({"nvidia_driver", "kernel_modules", "doca"})
# Rows a bundle may leave out that the roles then stop pinning (fabric manager, NSCQ and
# IMEX follow the driver's version whatever the bundle says of them).
UNPINNED_WHEN_LEFT_OUT = frozenset({"dcgm", "doca", "container_toolkit"})
# Bundle rows the rendered roles do not pin (yet): recorded with the bundle and compared
# like the others, but a node keeps what its repository gave it, and the charts are
# installed at the versions provisioner/sources.py pins. `plan` says so for each.
NOT_PINNED_BY_ROLES = {
    "containerd": "the roles install the distribution's containerd package without a pin",
    "gpu_operator": "the roles install the GPU Operator chart at the version "
                    "provisioner/sources.py pins",
    "network_operator": "the roles install the Network Operator chart at the version "
                        "provisioner/sources.py pins",
}
# Components whose packages apt can move back (`--allow-downgrades`); the rest cannot.
NO_DOWNGRADE = {"kubernetes": "kubeadm cannot downgrade a control plane (restore etcd from "
                "a backup instead)"}


@dataclass(frozen=True)
class Durations:
    """The plan's per-step estimates for one node, seconds."""

    cordon_s: float = 5.0
    drain_s: float = 300.0
    upgrade_s: float = 900.0
    reboot_s: float = 600.0
    gate_s: float = 300.0
    uncordon_s: float = 5.0
    # a control plane's kubeadm upgrade in place (new static pods, etcd's included), an
    # estimate: kubeadm waits up to 5 min per static pod, a healthy one restarts in about 1
    kubeadm_s: float = 300.0

    def node_s(self, reboot: bool) -> float:
        return (self.cordon_s + self.drain_s + self.upgrade_s + self.gate_s + self.uncordon_s
                + (self.reboot_s if reboot else 0.0))


@dataclass(frozen=True)
class PlanOptions:
    batch: int | str = "10%"
    max_unavailable: int | str = 1
    domain_label: str | None = None  # failure domain: a node label; default the rack
    durations: Durations = Durations()


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Change:
    component: str
    old: str | None
    new: str | None
    direction: str  # upgrade | downgrade | change
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class FirmwareMove:
    hostname: str
    component: str  # as the BMC names it: BMC, BIOS, ...
    old: str | None  # None: never recorded (the node was not inspected)
    new: str
    reset: str  # power_cycle | bmc_reset | next_boot | none
    direction: str  # upgrade | downgrade | change


@dataclass(frozen=True)
class NodePlan:
    hostname: str
    domain: str
    control_plane: bool
    changes: tuple[str, ...]
    reboot: bool
    node_s: float


@dataclass
class UpgradePlan:
    site: str
    bundle: str
    refusals: list[Refusal]
    warnings: list[str]
    changes: list[Change]
    nodes: list[NodePlan]
    batches: list[list[str]]
    planned_s: float
    max_unavailable: dict[str, int]
    rollback: list[str] = field(default_factory=list)  # what cannot be moved back
    workers_wait: bool = True  # the bundle moves Kubernetes: no worker before the API servers
    order: str = ""  # why the workers wait for the control planes, or why they need not
    # control planes whose kubeadm upgrade runs in place, one at a time, before any batch
    control_planes_first: list[str] = field(default_factory=list)
    # selected nodes an earlier apply left part-way: apply takes them up again
    resumed: list[str] = field(default_factory=list)
    selected_of: int = 0  # how many servers the site has (the selection's whole)
    firmware: list[FirmwareMove] = field(default_factory=list)  # upgrade/firmware.py

    @property
    def ok(self) -> bool:
        return not self.refusals

    @property
    def nothing_to_do(self) -> bool:
        """Every selected node already runs every version the bundle pins (a re-run after
        a finished apply), no chart moves and no node is part-way: apply would touch
        nothing."""
        return (self.ok and not self.changes and not self.resumed and not self.firmware
                and not any(n.changes for n in self.nodes))


def _key(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(p) for p in version.lstrip("v").split(".") if p.isdigit())


def direction(old: str | None, new: str | None) -> str:
    if old and new and old[:1].isdigit() == new[:1].isdigit() and _key(old) and _key(new):
        return "upgrade" if _key(new) > _key(old) else "downgrade"
    return "change"


def domain_of(plan: HostPlan, label: str | None) -> str:
    if label is None:
        return plan.placement.rack
    value = plan.node.labels.get(label)
    if value is None:
        raise ConfigError(f"{plan.hostname} has no label {label!r} for --failure-domain",
                          hint=f"add labels: {{{label}: ...}} to the node, or use the rack")
    return value


def _site_rules(loaded: LoadedSite, bundle: Bundle, nvswitch: bool,
                every: Sequence[HostPlan]) -> list[Refusal]:
    """The bundle's own rules; fabric manager's and NSCQ's only where a server has
    NVSwitch (a DGX-1 or a PCIe server runs neither: nothing to refuse)."""
    out: list[Refusal] = []

    def emit(code: str, _path: Any, message: str, hint: str | None = None, *,
             severity: Severity = Severity.ERROR, **_: Any) -> None:
        if severity is Severity.ERROR:
            out.append(Refusal(code, message, hint))

    software_checks.check(site_at(loaded, bundle), emit)
    site_drv = loaded.site.software.nvidia_driver
    at = bundle_driver(loaded.site.software, bundle)
    if site_drv is not None and at.kernel_flavour != site_drv.kernel_flavour:
        out.append(Refusal(
            "kernel-flavour-change", f"the bundle names kernel flavour "
            f"{bundle.nvidia_driver.kernel_flavour}, the site "
            f"{site_drv.kernel_flavour or 'the default'}",
            "the kernel flavour is the nodes' (software.nvidia_driver.kernel_flavour): drop "
            "it from the bundle, and change the site's when the nodes boot another kernel"))
    if site_drv is not None and at.source != site_drv.source:
        out.append(Refusal(
            "driver-source-change", f"the bundle takes the driver from "
            f"{bundle.nvidia_driver.source}, the site from {site_drv.source}",
            "a driver source is the site's (software.nvidia_driver.source), not a "
            "release's: drop source from the bundle; moving a site to another source is a "
            "reinstall of its GPU nodes, not a rolling upgrade"))
    drv = bundle.nvidia_driver.version
    if drv is None:
        out.append(Refusal("driver-not-exact", "the bundle pins only the driver branch "
                           f"{bundle.nvidia_driver.branch}", "pin nvidia_driver.version: an "
                           "upgrade must know the exact version to check and to gate on"))
    if bundle.nscq and drv and bundle.nscq != drv and any(h.block.nvswitch for h in every):
        out.append(Refusal("nscq-version", f"libnvidia-nscq {bundle.nscq} differs from "
                           f"driver {drv}", f"set nscq: '{drv}'"))
    if bundle.imex and drv and bundle.imex != drv:  # IMEX runs at the driver's version
        out.append(Refusal("imex-version", f"nvidia-imex {bundle.imex} differs from "
                           f"driver {drv}", f"set imex: '{drv}'"))
    if nvswitch and not bundle.fabric_manager:
        out.append(Refusal("fabric-manager-missing", "the site has NVSwitch systems and the "
                           "bundle pins no fabric_manager", f"set fabric_manager: '{drv}'"))
    return out


def minor_of(version: str | None) -> tuple[int, int] | None:
    """(1, 32) from "1.32.4" or "v1.32.4"; None when it names no minor."""
    k = _key(version)
    return (k[0], k[1]) if len(k) >= 2 else None


def _kube_rules(target: str, current: Mapping[str, Versions], cps: Sequence[str],
                selected: Sequence[str]) -> list[Refusal]:
    out: list[Refusal] = []
    new = minor_of(target)
    apis = [minor_of(current[h].get("kubernetes")) for h in cps if h in current]
    api = min((a for a in apis if a), default=None)
    if new is None or api is None:
        return out
    if new[0] != api[0]:
        return [Refusal("kubernetes-major", f"Kubernetes {target} changes the major version "
                        f"from {api[0]}", "no supported path; rebuild the cluster")]
    if new[1] > api[1] + 1:
        out.append(Refusal("kubernetes-skips-minor",
                           f"Kubernetes {target} skips a minor version: the API server is "
                           f"{api[0]}.{api[1]} and may move one minor at a time",
                           f"upgrade to {api[0]}.{api[1] + 1} first (a bundle per minor)"))
    olds = {h: minor_of(v.get("kubernetes")) for h, v in current.items()}
    if any(o is not None and o > new for o in olds.values()) \
            or any(_key(v.get("kubernetes")) > _key(target) for v in current.values()):
        out.append(Refusal("kubernetes-downgrade", f"Kubernetes {target} is older than what "
                           "runs now; " + NO_DOWNGRADE["kubernetes"],
                           "keep the current Kubernetes pin in the rollback bundle"))
    behind_cp = [h for h in cps if h not in selected and olds.get(h) is not None
                 and olds[h] < new]  # type: ignore[operator]
    if new > api and behind_cp and any(h not in cps for h in selected):
        out.append(Refusal("kubelet-newer-than-apiserver",
                           f"workers would run kubelet {target} while control plane(s) "
                           f"{', '.join(sorted(behind_cp))} still serve "
                           f"{api[0]}.{api[1]}: a kubelet must never be newer than the API "
                           "server", "include the control planes (they go first)"))
    at = [_key(current[h].get("kubernetes")) for h in cps if h in current]
    workers_move = any(_key(current[h].get("kubernetes")) < _key(target)
                       for h in selected if h not in cps and h in current)
    if (not out and workers_move and not any(h in cps for h in selected)
            and at and max(at) < _key(target)):
        # A patch too: the workers' `kubeadm upgrade node` needs the cluster's configuration
        # at the target, which only the first control plane's `kubeadm upgrade apply`
        # moves; each worker would fail the role's check after its drain.
        out.append(Refusal("workers-before-control-plane",
                           f"workers would move to Kubernetes {target} while no control "
                           "plane has: kubeadm moves the cluster's configuration with the "
                           "first control plane ('kubeadm upgrade apply')",
                           "include the control planes (they go first)"))
    for h, old in olds.items():
        if old is not None and h not in cps and new[1] - old[1] > 3:
            out.append(Refusal("kubelet-too-old", f"{h} runs kubelet {old[0]}.{old[1]}, more "
                               "than three minors behind the new API server",
                               "upgrade the workers to a closer version first"))
    return out


def make_plan(loaded: LoadedSite, hosts: Sequence[HostPlan], target: Bundle,
              current: Mapping[str, Versions], opts: PlanOptions,
              all_control_planes: Sequence[str] = (),
              site_hosts: Sequence[HostPlan] = (),
              down: Collection[str] = (), resumed: Collection[str] = ()) -> UpgradePlan:
    """The plan for moving `hosts` (the selected servers) to `target`. `current` holds what
    each node runs now (state's last bundle, or the site's pins); `all_control_planes` are
    every control plane of the site, selected or not (the API server's version);
    `site_hosts` every server, whose domains and roles the batches count (as `apply`);
    `down` and `resumed`: how apply will find the servers (apply._as_apply_finds)."""
    new = target.components()
    refusals = _site_rules(loaded, target, any(h.block.nvswitch for h in hosts),
                           site_hosts or hosts)
    cps = list(all_control_planes) or [h.hostname for h in hosts if h.control_plane]
    refusals += _kube_rules(target.kubernetes, current, cps, [h.hostname for h in hosts])
    per_comp: dict[tuple[str, str | None, str | None], list[str]] = {}
    flavour_moves: dict[str, list[str]] = {}  # "proprietary to open" -> hosts
    nodes: list[NodePlan] = []
    for hp in hosts:
        old = current.get(hp.hostname, {})
        changed = tuple(c for c in components_on(hp, loaded) if old.get(c) != new.get(c))
        for c in changed:
            per_comp.setdefault((c, old.get(c), new.get(c)), []).append(hp.hostname)
        if ((was := modules_at(hp, old)) != (now := modules_at(hp, new)) and now
                and new.get("kernel_modules") == "auto"):  # named in the bundle: its row says
            flavour_moves.setdefault(f"{was} to {now}", []).append(hp.hostname)
            changed += ("kernel_modules",) if "kernel_modules" not in changed else ()
        reboot = bool(REBOOT_COMPONENTS & set(changed))
        nodes.append(NodePlan(hp.hostname, domain_of(hp, opts.domain_label), hp.control_plane,
                              changed, reboot, opts.durations.node_s(reboot)))
    changes = [Change(c, o, n, direction(o, n), tuple(hs))
               for (c, o, n), hs in sorted(per_comp.items(), key=lambda kv: kv[0][0])]
    olds = [v for v in current.values()]
    for c in CLUSTER_COMPONENTS:
        before = {v.get(c) for v in olds} or {None}
        if new.get(c) not in before:
            changes.append(Change(c, sorted(map(str, before))[0], new.get(c),
                                  direction(next(iter(before)), new.get(c)), ()))
    warnings = [f"{ch.component} goes back from {ch.old} to {ch.new} on {len(ch.hosts)} "
                "node(s) (a downgrade: apt installs the older pinned packages)"
                for ch in changes if ch.direction == "downgrade"
                and ch.component not in NO_DOWNGRADE]
    warnings += [f"{ch.component} {ch.new} is recorded with the bundle but not applied: "
                 f"{NOT_PINNED_BY_ROLES[ch.component]}"
                 for ch in changes if ch.component in NOT_PINNED_BY_ROLES and ch.new]
    # a row the bundle leaves out is unpinned, not kept: say so (a bundle written from an
    # older template drops a pin nobody meant to drop)
    warnings += [f"{ch.component} is pinned at {ch.old} now and the bundle pins none: the "
                 "roles stop pinning it (a new node gets its repository's newest"
                 + ("; DOCA is no longer installed)" if ch.component == "doca" else ")")
                 for ch in changes if ch.old is not None and ch.new is None
                 and ch.component in UNPINNED_WHEN_LEFT_OUT]
    warnings += [f"the kernel modules go from {move} on {', '.join(hs)} (kernel_modules: auto "
                 "picks the open modules from R560 on Turing and later): apt replaces the "
                 "driver packages; name kernel_modules in the bundle to keep them"
                 for move, hs in sorted(flavour_moves.items())]
    rollback = [f"{c}: {why}" for c, why in NO_DOWNGRADE.items()
                if any(ch.component == c and ch.direction == "upgrade" for ch in changes)]
    kube_change = next((ch for ch in changes if ch.component == "kubernetes"), None)
    workers_wait = kube_change is not None
    sched = scheduler(loaded, site_hosts or hosts, opts, workers_wait)
    todo = [n.hostname for n in nodes if n.changes]
    first, layout = sched.layout_in_place(todo, down, resumed)
    order = ("workers go alongside the control planes (still one at a time, within each "
             "domain's limit): the bundle changes no Kubernetes version"
             if kube_change is None else
             f"the bundle changes Kubernetes ({kube_change.old} -> {kube_change.new}) and a "
             "kubelet is never newer than the API server: "
             + (f"first each control plane's kubeadm upgrade in place, one at a time, no "
                f"drain ({', '.join(first)}); then workers go alongside the control planes' "
                "rounds (if one fails in place, every control plane goes alone first)"
                if first else "workers wait for every control plane"))
    moved = sorted({h for (c, _o, _n), hs in per_comp.items() if c == "nvidia_driver"
                    for h in hs})
    if moved and loaded.site.software.os.startswith("dgx-os"):
        # DGX OS ships its driver and the role installs none; the role checks that the pin
        # is the driver DGX OS runs, after the drain. Said, not refused: after DGX OS's own
        # update, a bundle pinning its driver is how fabric manager and nscq follow it.
        warnings.append(
            f"the bundle moves the driver on {', '.join(moved)}, but "
            f"{loaded.site.software.os} ships its own and the tool installs none: each node "
            "must already run the bundle's driver (updated through DGX OS), or it fails its "
            "check after its drain")
    outside = sorted(n.hostname for n in nodes if n.changes
                     and n.hostname in outside_kubernetes(hosts))
    if outside:
        warnings.append(f"{', '.join(outside)}: no Kubernetes node (no control plane or "
                        "worker role): upgraded without cordon, drain or the cluster's checks")
    if 0 < len(cps) < 3 and any(n.control_plane for n in nodes if n.changes):
        warnings.append(f"{len(cps)} control plane(s): the API server is unavailable while "
                        "one upgrades (three or more keep quorum)")
    return UpgradePlan(site=loaded.site.site.name, bundle=target.name, refusals=refusals,
                       warnings=warnings, changes=changes, nodes=nodes, batches=layout,
                       planned_s=len(first) * opts.durations.kubeadm_s
                       + planned_s(layout, {n.hostname: n.node_s for n in nodes}),
                       max_unavailable=sched.domain_limits(), rollback=rollback,
                       workers_wait=workers_wait, order=order, control_planes_first=first,
                       resumed=sorted(set(resumed) & {h.hostname for h in hosts}),
                       selected_of=len(site_hosts or hosts))


def scheduler(loaded: LoadedSite, hosts: Sequence[HostPlan], opts: PlanOptions,
              workers_wait: bool = True) -> Scheduler:
    return Scheduler(domains={h.hostname: domain_of(h, opts.domain_label) for h in hosts},
                     control_planes=frozenset(h.hostname for h in hosts if h.control_plane),
                     batch=opts.batch, max_unavailable=opts.max_unavailable,
                     workers_wait=workers_wait)
