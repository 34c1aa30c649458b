"""Kubernetes checks of a site: control planes and their endpoint (VIP or load balancer),
the pod CIDR against the node count, overlaps with the site's networks, and a site whose
every node carries the GPU taint. No I/O; findings carry key paths (file:line).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from ipaddress import IPv4Address

from provisioner.inventory import compat
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import KeyPath, LoadedSite
from provisioner.inventory.models import BlockKind, BlockType, NetworkKind, Node, Role

Emit = Callable[..., None]
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
# The roles install Kubernetes 1.x only: pkgs.k8s.io serves one repository per v1.<minor>
# (sources.py), and roles/kubernetes/tasks/validate.yml fails any other version.
KUBERNETES_MAJOR = 1


def kubernetes_major_problem(version: str) -> tuple[str, str] | None:
    """(message, hint) when the roles would refuse this Kubernetes version's major."""
    major = compat.version_tuple(version)[0]
    if major == KUBERNETES_MAJOR:
        return None
    return (f"Kubernetes {version}: the roles install Kubernetes {KUBERNETES_MAJOR}.x only "
            f"(pkgs.k8s.io publishes a repository per v{KUBERNETES_MAJOR}.<minor>), not major "
            f"{major}", "pin a 1.x release, such as 1.31.4")


def node_roles(node: Node, kind: BlockKind) -> tuple[Role, ...]:
    """A node's roles: the inventory's, else by the kind of its block."""
    return node.roles or {
        BlockKind.GPU_SERVER: (Role.WORKER,),
        BlockKind.COMPUTE: (Role.WORKER,),
        BlockKind.HCI: (Role.WORKER,),
        BlockKind.STORAGE: (Role.STORAGE,),
        BlockKind.SWITCH: (Role.SWITCH,),
    }[kind]


def node_taints(block: BlockType, roles: Collection[Role]) -> list[str]:
    """The taints a node gets (render's provisioner_node_taints): a GPU control plane keeps
    pods that ask for no GPU off it."""
    return [GPU_TAINT] if block.gpu is not None and Role.CONTROL_PLANE in roles else []


def check(loaded: LoadedSite, emit: Emit) -> None:
    k8s = loaded.site.software.kubernetes
    if k8s is None:
        return
    if (major := kubernetes_major_problem(k8s.version)) is not None:
        emit("kubernetes-major", ("software", "kubernetes", "version"), *major)
    control = members = gpu_tainted = 0
    for p in loaded.site.placements:
        block = loaded.catalog.get(p.block)
        for node in p.nodes:
            roles = node_roles(node, block.kind) if block else node.roles or ()
            if Role.CONTROL_PLANE in roles:
                control += 1
                gpu_tainted += block is not None and GPU_TAINT in node_taints(block, roles)
            if Role.CONTROL_PLANE in roles or Role.WORKER in roles:
                members += 1
    if members and gpu_tainted == members:
        emit("every-node-gpu-tainted", ("software", "kubernetes"),
             f"every Kubernetes node is a GPU control plane, tainted "
             f"{GPU_TAINT} ({members}): pods that tolerate no such "
             "taint (CoreDNS, the CNI's controllers, most add-ons) have no node to run on, "
             "and a drain or an upgrade leaves them Pending",
             "add a node without GPUs (a control plane or a worker), or make a GPU node a "
             "worker only", severity=Severity.WARNING, at_key=True)
    _pod_cidr(k8s.pod_cidr.prefixlen, members, k8s.cni, emit)
    if control == 0:
        emit("no-control-plane", ("software", "kubernetes"),
             "Kubernetes is planned but no node has the control-plane role",
             "give one or three nodes roles: [control-plane]", at_key=True)
    if control > 1 and k8s.vip is None and not k8s.load_balancer:
        # kubeadm HA: further control planes join through controlPlaneEndpoint; pointing it
        # at one control plane makes that node a single point of failure.
        emit("kubernetes-no-endpoint", ("software", "kubernetes"),
             f"{control} control planes but no stable API endpoint",
             "set kubernetes.vip (kube-vip serves it) or kubernetes.load_balancer",
             at_key=True)
    if k8s.vip is not None:
        _vip(loaded, k8s.vip, emit)
        # kube-vip starts before the cluster exists with the super-admin.conf kubeadm writes
        # from 1.29 on (kube-vip's static-pod page; kubeadm 1.29 release notes)
        if compat.version_tuple(k8s.version)[:2] < (1, 29):
            emit("vip-needs-kubernetes-1-29", ("software", "kubernetes", "version"),
                 f"kubernetes.vip needs Kubernetes 1.29 or later, not {k8s.version}: kube-vip "
                 "starts with kubeadm's super-admin.conf, which older kubeadm does not write",
                 "pin Kubernetes 1.29 or later, or serve the endpoint with the site's load "
                 "balancer (kubernetes.load_balancer)")
    if control % 2 == 0 and control:
        emit("even-control-plane", ("software", "kubernetes"),
             f"{control} control-plane nodes: etcd needs an odd number for a useful quorum",
             "use 1, 3 or 5", severity=Severity.WARNING, at_key=True)
    for net in loaded.site.networks:
        for name, cidr in (("pod_cidr", k8s.pod_cidr), ("service_cidr", k8s.service_cidr)):
            if cidr.overlaps(net.cidr):
                emit("network-overlap", ("software", "kubernetes", name),
                     f"Kubernetes {name} {cidr} overlaps network {net.name} {net.cidr}")


NODE_CIDR_PREFIX = 24  # kube-controller-manager --node-cidr-mask-size (IPv4 default)


def _pod_cidr(prefix: int, members: int, cni: str, emit: Emit) -> None:
    """Each node gets a /24 of the pod CIDR: kubeadm refuses a pod subnet smaller than one
    (ValidatePodSubnetNodeMask), and the nodes past 2^(24 - prefix) get none. flannel and
    Cilium's cluster pool (mask 24) give pods addresses from it; Calico's own IPAM does
    not, but the controller manager logs CIDRNotAvailable for each such node."""
    path: KeyPath = ("software", "kubernetes", "pod_cidr")
    if prefix > NODE_CIDR_PREFIX:
        emit("pod-cidr-too-small", path,
             f"pod_cidr is a /{prefix}: kubeadm refuses a pod subnet smaller than the /"
             f"{NODE_CIDR_PREFIX} it gives each node", "use a /16 (65,536 addresses) or at "
             f"most a /{NODE_CIDR_PREFIX}")
        return
    room = 2 ** (NODE_CIDR_PREFIX - prefix)
    if members > room:
        emit("pod-cidr-too-few-nodes", path,
             f"pod_cidr /{prefix} holds {room} node range{'' if room == 1 else 's'} (a "
             f"/{NODE_CIDR_PREFIX} each) for {members} Kubernetes nodes: the nodes past "
             f"{room} get no pod range"
             + ("" if cni != "calico" else " (Calico's own IPAM still gives their pods "
                "addresses)"), f"use a /{NODE_CIDR_PREFIX - (members - 1).bit_length()} or "
             "larger", severity=Severity.WARNING if cni == "calico" else Severity.ERROR)


def _vip(loaded: LoadedSite, vip: IPv4Address, emit: Emit) -> None:
    """kube-vip announces the VIP by ARP on the control planes' management segment: it must
    lie in the management network and belong to no node."""
    path: KeyPath = ("software", "kubernetes", "vip")
    mgmt = [n for n in loaded.site.networks if n.kind is NetworkKind.MANAGEMENT]
    if mgmt and not any(vip in n.cidr for n in mgmt):
        emit("vip-outside-management", path,
             f"kubernetes.vip {vip} is outside the management network "
             f"{', '.join(str(n.cidr) for n in mgmt)}",
             "pick a free address of the management network (kube-vip announces it by ARP)")
    for p in loaded.site.placements:
        for node in p.nodes:
            if vip in node.addresses.values():
                emit("vip-taken", path, f"kubernetes.vip {vip} is {node.hostname}'s address",
                     "pick an address no node uses")
