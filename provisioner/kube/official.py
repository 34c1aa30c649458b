"""KubeClient on the official `kubernetes` Python client (the only module importing it).

Cordon and uncordon patch `spec.unschedulable` as `kubectl cordon` does; eviction is a
policy/v1 Eviction (POST .../pods/NAME/eviction), which the API server answers 429 while a
PodDisruptionBudget forbids it (kubernetes.io "API-initiated eviction"). Errors become
KubeError with the HTTP status; no message carries the token.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s  # type: ignore[import-untyped]
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from provisioner.errors import KubeError
from provisioner.kube import (
    CORDONED_BY,
    GPU_RESOURCE,
    Down,
    Eviction,
    NodeHealth,
    PodRef,
    image_tag,
)
from provisioner.secrets import Secret

T = TypeVar("T")


class OfficialClient:
    """The cluster through the official client: a kubeconfig, or a URL (+ bearer token)."""

    def __init__(self, *, kubeconfig: Path | None = None, url: str | None = None,
                 token: Secret | None = None, verify_tls: bool = True,
                 ca_file: Path | None = None, timeout_s: float = 10.0) -> None:
        if kubeconfig is not None:
            try:
                api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
            except Exception as exc:  # the loader raises several kinds; name the file only
                raise KubeError(f"kubeconfig {kubeconfig}: cannot load it "
                                f"({type(exc).__name__})",
                                hint="check the path and that it names a current context"
                                ) from None
        elif url is not None:
            conf = k8s.Configuration(host=url.rstrip("/"))
            conf.verify_ssl = verify_tls
            # kubeadm's cluster CA (/etc/kubernetes/pki/ca.crt) is in no public bundle
            if ca_file is not None:
                if not ca_file.is_file():
                    raise KubeError(f"--kube-ca {ca_file}: no such file",
                                    hint="copy the cluster's CA certificate "
                                    "(/etc/kubernetes/pki/ca.crt on a control plane)")
                conf.ssl_ca_cert = str(ca_file)
            if token is not None:
                conf.api_key = {"authorization": token.reveal()}
                conf.api_key_prefix = {"authorization": "Bearer"}
            api = k8s.ApiClient(conf)
        else:
            raise KubeError("no Kubernetes API: give a kubeconfig or a URL")
        self._timeout_s = timeout_s
        self._core = k8s.CoreV1Api(api)
        self._policy = k8s.PolicyV1Api(api)

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        try:
            return fn(*args, _request_timeout=self._timeout_s, **kw)
        except ApiException as exc:
            raise KubeError(f"{what}: the API server answered {exc.status} {exc.reason}",
                            status=exc.status) from None
        except urllib3.exceptions.HTTPError as exc:
            raise KubeError(f"{what}: no answer from the API server ({type(exc).__name__})",
                            hint="check the URL or kubeconfig and the network") from None

    def _schedulable(self, node: str, unschedulable: bool) -> None:
        # the annotation marks the cordon as ours (null removes it: a merge patch)
        mark = {CORDONED_BY: "upgrade" if unschedulable else None}
        self._call(f"{'cordon' if unschedulable else 'uncordon'} {node}",
                   self._core.patch_node, node, {"spec": {"unschedulable": unschedulable},
                                                 "metadata": {"annotations": mark}})

    def cordon(self, node: str) -> None:
        self._schedulable(node, True)

    def uncordon(self, node: str) -> None:
        self._schedulable(node, False)

    def pods_on(self, node: str) -> list[PodRef]:
        pods = self._call(f"list pods on {node}", self._core.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}")
        out = []
        for p in pods.items:
            meta = p.metadata
            # the owner kubectl drain goes by: the one marked controller (GetControllerOf)
            controller = next((o for o in meta.owner_references or [] if o.controller), None)
            annotations = meta.annotations or {}
            volumes = (p.spec.volumes if p.spec is not None else None) or []
            out.append(PodRef(meta.namespace, meta.name,
                              controller.kind if controller is not None else None,
                              "kubernetes.io/config.mirror" in annotations,
                              meta.uid or "", unmanaged=controller is None,
                              local_storage=any(v.empty_dir is not None for v in volumes),
                              finished=(p.status.phase if p.status is not None else None)
                              in ("Succeeded", "Failed")))
        return out

    def evict(self, pod: PodRef, grace_s: int | None = None) -> Eviction:
        body = k8s.V1Eviction(
            metadata=k8s.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
            delete_options=(k8s.V1DeleteOptions(grace_period_seconds=grace_s)
                            if grace_s is not None else None))
        try:
            self._call(f"evict {pod}", self._core.create_namespaced_pod_eviction,
                       pod.name, pod.namespace, body)
        except KubeError as exc:
            if exc.status == 429:
                return Eviction.BLOCKED
            if exc.status == 404:
                return Eviction.GONE
            raise
        return Eviction.EVICTED

    def delete(self, pod: PodRef) -> None:
        try:
            self._call(f"delete {pod}", self._core.delete_namespaced_pod, pod.name,
                       pod.namespace)
        except KubeError as exc:
            if exc.status != 404:
                raise

    def health(self, node: str) -> NodeHealth:
        n = self._call(f"read node {node}", self._core.read_node, node)
        status, spec = n.status, n.spec
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        gpus = str((status.allocatable or {}).get(GPU_RESOURCE, "0"))
        info = status.node_info
        return NodeHealth(ready=ready, unschedulable=bool(spec and spec.unschedulable),
                          allocatable_gpus=int(gpus) if gpus.isdigit() else 0,
                          kubelet_version=info.kubelet_version if info else None)

    def apiserver_version(self, node: str) -> str | None:
        try:
            pod = self._call(f"read the API server pod of {node}",
                             self._core.read_namespaced_pod, f"kube-apiserver-{node}",
                             "kube-system")
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        images = [c.image or "" for c in (pod.spec.containers if pod.spec else None) or []
                  if c.name == "kube-apiserver"]
        return image_tag(images[0]) if images else None

    def unavailable(self) -> dict[str, Down]:
        nodes = self._call("list nodes", self._core.list_node)
        out = {}
        for n in nodes.items:
            conditions = (n.status.conditions if n.status else None) or []
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            if n.spec and n.spec.unschedulable:
                ours = CORDONED_BY in (n.metadata.annotations or {})
                out[n.metadata.name] = Down.OURS if ours else Down.CORDONED
            elif not ready:
                out[n.metadata.name] = Down.NOT_READY
        return out

    def pdbs(self) -> list[str]:
        res = self._call("list PodDisruptionBudgets",
                         self._policy.list_pod_disruption_budget_for_all_namespaces)
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in res.items]
