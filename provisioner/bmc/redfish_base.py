"""What every operation of the Redfish driver (redfish.py) stands on, kept apart to keep
each module short: the connection (redfish_http.py), its retries and error mapping, GETs
(with the ETag a PATCH needs), which system is the node's, a short-lived snapshot of it,
and its vendor quirks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests
import sushy
from sushy.connector import Connector

from provisioner.bmc.base import BmcTarget
from provisioner.bmc.quirks import Quirks, quirks_for
from provisioner.bmc.redfish_http import call_translated, json_body, open_connection
from provisioner.bmc.redfish_map import JSON, odata_ids
from provisioner.bmc.retry import RetryPolicy, retry
from provisioner.errors import BmcError, BmcUnsupported

T = TypeVar("T")


class RedfishBase:
    """One node's Redfish BMC: the plumbing (RedfishDriver adds the operations)."""

    # A system read this recently is reused instead of read again (one operation reads the
    # system, the next one starts from it): fewer requests to slow BMCs.
    SNAPSHOT_MAX_AGE_S = 1.0

    def __init__(self, target: BmcTarget, *, retry_policy: RetryPolicy | None = None,
                 poll_interval_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.target = target
        self.retry_policy = retry_policy or RetryPolicy()
        self.poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._conn: Connector | None = None
        self._root: sushy.Sushy | None = None
        self._system_path: str | None = None
        self._quirks: Quirks | None = None
        self._snapshot: tuple[float, JSON] | None = None
        self._last_answer: tuple[int, str] | None = None  # status, content type

    # -------------------------------------------------------- plumbing

    @property
    def base_url(self) -> str:
        t = self.target
        port = f":{t.port}" if t.port else ""
        host = f"[{t.address}]" if ":" in t.address else t.address
        return f"{t.scheme}://{host}{port}"

    def validate(self) -> None:
        t = self.target
        if t.protocol != "redfish":
            raise BmcUnsupported(f"{t.node}: not a Redfish BMC ({t.protocol})")
        if t.scheme == "http" and (t.tls.ca_bundle or t.tls.fingerprint_sha256):
            raise BmcUnsupported(f"{t.node}: TLS settings given for a plain-HTTP endpoint")

    def _verify(self) -> bool | str:
        tls = self.target.tls
        if tls.fingerprint_sha256:
            return False  # the pinned adapter checks the certificate instead
        if tls.ca_bundle:
            return tls.ca_bundle
        return tls.verify

    def _connect(self) -> Connector:
        if self._conn is not None:
            return self._conn
        conn, self._root = open_connection(self.target, self.base_url, self._verify(),
                                           self._remember_answer, self._call)
        self._conn = conn
        return conn

    def _call(self, fn: Callable[[], T]) -> T:
        """Run a sushy/requests call, mapping its exceptions onto the BmcError family."""
        return call_translated(fn, node=self.target.node, url=self.base_url,
                               last_answer=lambda: self._last_answer)

    def _remember_answer(self, resp: requests.Response, *args: Any, **kwargs: Any) -> None:
        self._last_answer = (resp.status_code, resp.headers.get("Content-Type") or
                             "no Content-Type")

    def _retry(self, fn: Callable[[], T], deadline: float | None = None,
               policy: RetryPolicy | None = None,
               only: Callable[[BmcError], bool] | None = None) -> T:
        return retry(lambda: self._call(fn), policy or self.retry_policy, sleep=self._sleep,
                     deadline=deadline, only=only)

    def _get(self, path: str) -> JSON:
        conn = self._connect()
        return json_body(self.target.node, self._retry(lambda: conn.get(path)))

    def _get_with_etag(self, path: str) -> tuple[JSON, str | None]:
        conn = self._connect()
        resp = self._retry(lambda: conn.get(path))
        body = json_body(self.target.node, resp)
        # Some BMCs give the ETag only in the body and answer a PATCH without If-Match with
        # 428 (ansible/ansible PR #56150, Lenovo; NVIDIA libredfish reads it there for DGX).
        etag = resp.headers.get("ETag") or body.get("@odata.etag")
        return body, str(etag) if etag else None

    def _system_uri(self) -> str:
        if self._system_path:
            return self._system_path
        if self.target.system_id:
            self._system_path = f"/redfish/v1/Systems/{self.target.system_id}"
            return self._system_path
        members = odata_ids(self._get("/redfish/v1/Systems"))
        default = quirks_for(self._vendor_hint()).default_system_id
        chosen = [m for m in members if default and m.rstrip("/").endswith("/" + default)]
        if len(members) == 1:
            self._system_path = members[0]
        elif chosen:
            self._system_path = chosen[0]
        else:
            raise BmcUnsupported(
                f"{self.target.node}: the BMC has {len(members)} systems",
                hint="set bmc.system_id in the inventory")
        return self._system_path

    def _vendor_hint(self) -> str | None:
        root = self._root
        vendor = (root.json or {}).get("Vendor") if root is not None else None
        return str(vendor) if vendor else None

    def _system(self, *, fresh: bool = False) -> JSON:
        snap = self._snapshot
        if not fresh and snap and time.monotonic() - snap[0] < self.SNAPSHOT_MAX_AGE_S:
            return snap[1]
        return self._remember(self._get(self._system_uri()))

    def _remember(self, system: JSON) -> JSON:
        self._snapshot = (time.monotonic(), system)
        return system

    def quirks(self, system: JSON | None = None) -> Quirks:
        if self._quirks is None:
            system = system or self._system()
            self._quirks = quirks_for(system.get("Manufacturer") or self._vendor_hint(),
                                      system.get("Model"))
        return self._quirks
