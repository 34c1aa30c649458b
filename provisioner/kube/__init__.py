"""Kubernetes through one interface: what a rolling upgrade asks of the cluster.

`KubeClient` is the Protocol the upgrade steps call (cordon, pods on a node, evict, delete,
uncordon, Ready, allocatable GPUs, PDBs); `official.OfficialClient` implements it with the
official `kubernetes` Python client, the only module that imports it. The lab and the tests
have no API server: they run `standin.StandInApiServer`, a small HTTP server that answers
the same API paths the client calls (429 for an eviction a PodDisruptionBudget blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

# The extended resource the NVIDIA device plugin advertises (k8s-device-plugin README).
GPU_RESOURCE = "nvidia.com/gpu"
# Set with our own cordon, removed with our uncordon: a node cordoned with it is ours (a
# run killed between the cordon and its record), one cordoned without it an operator's.
CORDONED_BY = "provisioner.io/cordoned-by"


class Down(StrEnum):
    """Why a node is not serving, as `KubeClient.unavailable` reports it."""

    CORDONED = "unschedulable"  # cordoned by someone else: maintenance; left alone
    OURS = "cordoned by provisioner"  # our own cordon (it carries CORDONED_BY)
    NOT_READY = "not Ready"


class Eviction(StrEnum):
    EVICTED = "evicted"  # 201: the API server accepted the eviction
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget does not allow it now
    GONE = "gone"  # 404: the pod is already gone


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    owner_kind: str | None = None  # DaemonSet pods are not evicted (kubectl drain's rule)
    mirror: bool = False  # static pods (mirror pods) cannot be evicted
    # which pod of that name: a StatefulSet pod evicted and recreated under the same name
    # is another pod (kubectl drain waits on UIDs for that reason)
    uid: str = ""
    # kubectl drain's filters (k8s.io/kubectl/pkg/drain/filters.go): a pod no controller
    # owns is deleted for good, and an emptyDir's data with its pod; drain refuses both
    # unless told (--force, --delete-emptydir-data). A finished pod is never refused.
    unmanaged: bool = False
    local_storage: bool = False
    finished: bool = False

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeHealth:
    ready: bool
    unschedulable: bool
    allocatable_gpus: int
    kubelet_version: str | None


def image_tag(ref: str) -> str | None:
    """The tag of an image reference: registry.k8s.io/kube-apiserver:v1.32.4 (kubeadm's
    manifest), a registry with a port, a tag pinned by digest; None for a digest only."""
    name = ref.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.partition(":")[2] or None


class KubeClient(Protocol):
    """The cluster operations of a rolling upgrade; errors are KubeError."""

    def cordon(self, node: str) -> None: ...

    def uncordon(self, node: str) -> None: ...

    def pods_on(self, node: str) -> list[PodRef]: ...

    def evict(self, pod: PodRef, grace_s: int | None = None) -> Eviction: ...

    def delete(self, pod: PodRef) -> None: ...

    def health(self, node: str) -> NodeHealth: ...

    def apiserver_version(self, node: str) -> str | None:
        """The version (image tag) of the API server a control plane runs: its static
        pod's mirror, kube-system/kube-apiserver-NODE as kubeadm names it; None if absent."""
        ...

    def unavailable(self) -> dict[str, Down]:
        """Nodes not serving now, whoever made them so, and why. One list call."""
        ...

    def pdbs(self) -> list[str]: ...
