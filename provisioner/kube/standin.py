"""A stand-in Kubernetes API server for the lab and the tests (never for a real cluster).

These machines have no API server, so the lab and the tests run this one: an HTTP server
that answers the API paths `official.OfficialClient` calls, with the official client doing
the talking. Its world is a JSON file (nodes, pods, PodDisruptionBudgets, a request log),
re-read on every request, so a test or an operator in the lab can change it while a run is
under way (make a node NotReady, release a PDB). Eviction follows the policy/v1 rules that
matter here: a pod a PDB covers is evicted only while the PDB allows a disruption, and
otherwise answered 429 Too Many Requests, as kube-apiserver does.

    python -m provisioner.kube.standin --state world.json --port 0   (prints the URL)
"""

from __future__ import annotations

import argparse
import hmac
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

_LOCK = threading.Lock()


def world(nodes: list[str], *, gpus: int = 8, kubelet: str = "v1.35.8",  # the example's pin
          control_planes: tuple[str, ...] = ()) -> dict[str, Any]:
    """A starting world: every node Ready and schedulable, no PDBs, no pods but each
    control plane's API server (kubeadm's static pod, listed as its mirror pod)."""
    return {"nodes": {n: {"ready": True, "unschedulable": False, "gpus": gpus,
                          "kubelet": kubelet} for n in nodes},
            "pods": [apiserver_pod(cp, kubelet) for cp in control_planes],
            "pdbs": [], "log": []}


def _apiserver_image(version: str) -> str:
    return f"registry.k8s.io/kube-apiserver:{version}"  # kubeadm's manifest


def apiserver_pod(node: str, version: str) -> dict[str, Any]:
    """The mirror pod of kubeadm's kube-apiserver static pod on `node`."""
    return {"namespace": "kube-system", "name": f"kube-apiserver-{node}", "node": node,
            "mirror": True, "container": "kube-apiserver", "image": _apiserver_image(version)}


def move_versions(w: dict[str, Any], nodes: list[str], version: str,
                  kubelet: bool = True) -> None:
    """What a kubeadm upgrade leaves on `nodes`: the kubelet at `version` (unless `kubelet`
    is false: a control plane's upgrade in place, before its own round), and on a control
    plane the API server's static pod at it too (tests that record the host side)."""
    for n in nodes if kubelet else ():
        w["nodes"][n]["kubelet"] = version
    for p in w["pods"]:
        if p["node"] in nodes and p["name"] == f"kube-apiserver-{p['node']}":
            p["image"] = _apiserver_image(version)


def _node_json(name: str, n: dict[str, Any]) -> dict[str, Any]:
    info = {k: "stand-in" for k in ("architecture", "bootID", "containerRuntimeVersion",
                                    "kernelVersion", "kubeProxyVersion", "machineID",
                                    "operatingSystem", "osImage", "systemUUID")}
    info["kubeletVersion"] = n.get("kubelet", "v0.0.0")
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": n.get("annotations", {})},
            "spec": {"unschedulable": bool(n.get("unschedulable"))},
            "status": {"conditions": [{"type": "Ready",
                                       "status": "True" if n.get("ready") else "False"}],
                       "allocatable": {"nvidia.com/gpu": str(n.get("gpus", 0))},
                       "nodeInfo": info}}


def _pod_json(p: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": p["name"], "namespace": p["namespace"],
                            "labels": p.get("labels", {}),
                            "uid": p.get("uid", f"uid-{p['namespace']}-{p['name']}")}
    if p.get("owner"):
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": p["owner"],
                                    "name": p["name"] + "-owner", "uid": "0",
                                    "controller": True}]
    if p.get("deleting"):  # evicted or deleted, still in its grace period
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if p.get("mirror"):  # a static pod's mirror: the kubelet's config hash annotation
        meta["annotations"] = {"kubernetes.io/config.mirror": "stand-in"}
    container = {"name": p.get("container", "c"), "image": p.get("image", "stand-in")}
    spec: dict[str, Any] = {"nodeName": p["node"], "containers": [container]}
    if p.get("emptydir"):  # scratch space that goes with the pod
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": p.get("phase", "Running")}}


def _delete(w: dict[str, Any], pod: dict[str, Any]) -> None:
    """Gone at once, or (with `terminating_lists`) terminating for that many pod lists, as a
    pod in its termination grace period stays listed with a deletionTimestamp. With
    `recreate`, its controller makes it again at once (a StatefulSet pod that tolerates the
    cordon): same name, another UID."""
    if pod.get("terminating_lists", 0) > 0:
        pod["deleting"] = True
    else:
        w["pods"].remove(pod)
    if pod.pop("recreate", False):  # its controller makes it again, same name, new UID
        w["pods"].append({k: v for k, v in pod.items() if k not in (
            "deleting", "terminating_lists")} | {"uid": f"uid-{pod['name']}-2"})


def _covering(w: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any] | None:
    labels = pod.get("labels", {})
    for pdb in w["pdbs"]:
        if pdb["namespace"] == pod["namespace"] and all(
                labels.get(k) == v for k, v in pdb["selector"].items()):
            return cast(dict[str, Any], pdb)
    return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
            "reason": reason, "message": message}


class _Handler(BaseHTTPRequestHandler):
    server: StandInApiServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read the log
        return

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        return dict(json.loads(raw or b"{}"))

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        body = self._body() if method in ("POST", "PATCH") else {}
        token = self.server.token
        with _LOCK:
            w = self.server.load()
            if token is not None and not hmac.compare_digest(
                    self.headers.get("Authorization", ""), f"Bearer {token}"):
                code, out = 401, _status(401, "Unauthorized", "Unauthorized")
            else:
                code, out = self._answer(w, method, parts, parse_qs(url.query), body)
            w["log"].append({"method": method, "path": url.path, "code": code})
            self.server.save(w)
        self._send(code, out)

    def _answer(self, w: dict[str, Any], method: str, parts: list[str],
                query: dict[str, list[str]], body: dict[str, Any]
                ) -> tuple[int, dict[str, Any]]:
        if parts == ["api", "v1", "nodes"] and method == "GET":
            return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                         "items": [_node_json(name, n) for name, n in w["nodes"].items()]}
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = w["nodes"].get(parts[3])
            if node is None:
                return 404, _status(404, "NotFound", f'nodes "{parts[3]}" not found')
            if method == "PATCH":
                spec = body.get("spec", {})
                if "unschedulable" in spec:
                    node["unschedulable"] = bool(spec["unschedulable"])
                for key, value in body.get("metadata", {}).get("annotations", {}).items():
                    notes = node.setdefault("annotations", {})
                    if value is None:  # a merge patch's null removes the key
                        notes.pop(key, None)
                    else:
                        notes[key] = value
            return 200, _node_json(parts[3], node)
        if parts == ["api", "v1", "pods"] and method == "GET":
            sel = (query.get("fieldSelector") or [""])[0]
            want = sel.removeprefix("spec.nodeName=") if sel.startswith("spec.nodeName=") \
                else None
            listed = [p for p in w["pods"] if want is None or p["node"] == want]
            items = [_pod_json(p) for p in listed]
            for p in listed:  # a terminating pod is listed `terminating_lists` more times
                if p.get("deleting"):
                    p["terminating_lists"] = p.get("terminating_lists", 0) - 1
                    if p["terminating_lists"] <= 0:
                        w["pods"].remove(p)
            return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {},
                         "items": items}
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 6 \
                and parts[4] == "pods":
            ns, name = parts[3], parts[5]
            pod = next((p for p in w["pods"] if p["namespace"] == ns and p["name"] == name),
                       None)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if method == "POST" and parts[6:] == ["eviction"]:
                pdb = _covering(w, pod)
                if pdb is not None and pdb["disruptions_allowed"] < 1:
                    return 429, _status(429, "TooManyRequests", "Cannot evict pod as it would "
                                        "violate the pod's disruption budget.")
                if pdb is not None and not pod.get("deleting"):
                    pdb["disruptions_allowed"] -= 1
                _delete(w, pod)
                return 201, {"apiVersion": "policy/v1", "kind": "Eviction",
                             "metadata": {"name": name, "namespace": ns}}
            if method == "GET" and len(parts) == 6:
                return 200, _pod_json(pod)
            if method == "DELETE" and len(parts) == 6:
                _delete(w, pod)
                return 200, _pod_json(pod)
        if parts == ["apis", "policy", "v1", "poddisruptionbudgets"] and method == "GET":
            items = [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": p["name"], "namespace": p["namespace"]},
                      "spec": {"selector": {"matchLabels": p["selector"]}},
                      "status": {"currentHealthy": 0, "desiredHealthy": 0,
                                 "disruptionsAllowed": p["disruptions_allowed"],
                                 "expectedPods": 0}} for p in w["pdbs"]]
            return 200, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList",
                         "metadata": {}, "items": items}
        return 404, _status(404, "NotFound", "the stand-in does not serve this path")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_DELETE(self) -> None:
        self._route("DELETE")


class StandInApiServer(ThreadingHTTPServer):
    """The stand-in on 127.0.0.1 (port 0: any free port); `url` once started. With a
    `token`, it answers 401 Unauthorized to a request without that bearer token, as an API
    server does to an unauthenticated client."""

    daemon_threads = True

    def __init__(self, state: Path, port: int = 0, token: str | None = None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = state
        self.token = token  # when set, a request without this bearer token gets 401

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def load(self) -> dict[str, Any]:
        return dict(json.loads(self.state.read_text()))

    def save(self, w: dict[str, Any]) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(w, indent=1))
        tmp.replace(self.state)

    def edit(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Change the world between two requests (a test, or an operator in the lab)."""
        with _LOCK:
            w = self.load()
            change(w)
            self.save(w)

    def start(self) -> StandInApiServer:
        threading.Thread(target=self.serve_forever, daemon=True, name="kube-standin").start()
        return self


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="stand-in Kubernetes API server (lab, tests)")
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    srv = StandInApiServer(args.state, args.port)
    print(srv.url, flush=True)  # the one line the caller reads
    srv.serve_forever()


if __name__ == "__main__":
    main()
