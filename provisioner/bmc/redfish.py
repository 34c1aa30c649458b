"""Redfish driver on sushy.

sushy supplies the transport: its Connector (requests session, basic or session auth,
ETag/If-Match workarounds, typed HTTP errors) and the service root. Redfish payloads are
mapped onto the neutral vocabulary of bmc/base.py by the pure functions and tables below,
which unit tests feed with captured Dell, HPE, Supermicro and Lenovo payloads.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import requests
import sushy
from requests.adapters import HTTPAdapter
from sushy import auth as sushy_auth
from sushy import exceptions as sushy_exc
from sushy.connector import Connector
from urllib3.exceptions import InsecureRequestWarning

from provisioner.bmc.base import (
    ACTION_TARGET,
    BmcTarget,
    BootDevice,
    BootMode,
    BootSetting,
    Gpu,
    HardwareFacts,
    NicFact,
    PowerAction,
    PowerState,
    PsuFact,
    request_power,
)
from provisioner.bmc.quirks import Quirks, quirks_for
from provisioner.bmc.retry import RetryPolicy, retry
from provisioner.errors import (
    BmcAuthError,
    BmcError,
    BmcProtocolError,
    BmcRefused,
    BmcTimeout,
    BmcUnreachable,
    BmcUnsupported,
)

T = TypeVar("T")
JSON = dict[str, Any]

# sushy logs request details at DEBUG and its session-auth fallbacks as errors; this driver
# reports every failure itself, so keep the library's loggers out of the user's console.
for _name in ("sushy", "urllib3"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

# ---------------------------------------------------------------- mapping tables

POWER_STATE_FROM_REDFISH: dict[str, PowerState] = {
    "On": PowerState.ON,
    "Off": PowerState.OFF,
    "PoweringOn": PowerState.POWERING_ON,
    "PoweringOff": PowerState.POWERING_OFF,
    "Paused": PowerState.ON,
}

# Reset types in order of preference; the first one the BMC allows is used.
RESET_TYPES: dict[PowerAction, tuple[str, ...]] = {
    PowerAction.ON: ("On", "ForceOn", "PushPowerButton"),
    PowerAction.OFF: ("ForceOff", "PushPowerButton"),
    PowerAction.SOFT_OFF: ("GracefulShutdown",),
    PowerAction.CYCLE: ("PowerCycle", "ForceRestart", "GracefulRestart"),
    PowerAction.RESET: ("ForceRestart", "GracefulRestart", "PowerCycle"),
}

BOOT_TARGET_TO_REDFISH: dict[BootDevice, str] = {
    BootDevice.PXE: "Pxe",
    BootDevice.DISK: "Hdd",
    BootDevice.CD: "Cd",
    BootDevice.BIOS: "BiosSetup",
    BootDevice.NONE: "None",
}
BOOT_TARGET_FROM_REDFISH: dict[str, BootDevice] = {
    **{v: k for k, v in BOOT_TARGET_TO_REDFISH.items()},
    "UsbCd": BootDevice.CD,
    "UefiHttp": BootDevice.PXE,
}
BOOT_MODE_TO_REDFISH = {BootMode.UEFI: "UEFI", BootMode.LEGACY: "Legacy"}
BOOT_MODE_FROM_REDFISH = {v: k for k, v in BOOT_MODE_TO_REDFISH.items()}

# ---------------------------------------------------------------- pure mapping


def power_state(system: JSON) -> PowerState:
    return POWER_STATE_FROM_REDFISH.get(str(system.get("PowerState")), PowerState.UNKNOWN)


def allowed_reset_types(system: JSON) -> list[str]:
    action = (system.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
    values = action.get("ResetType@Redfish.AllowableValues")
    return list(values) if isinstance(values, list) else []


def reset_target(system: JSON) -> str | None:
    action = (system.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
    target = action.get("target")
    return str(target) if target else None


def choose_reset_type(action: PowerAction, allowed: list[str]) -> str:
    """The first preferred reset type the BMC allows (all preferred ones if it lists none)."""
    prefs = RESET_TYPES[action]
    if not allowed:
        return prefs[0]
    for candidate in prefs:
        if candidate in allowed:
            return candidate
    raise BmcUnsupported(
        f"power {action.value}: the BMC allows only {', '.join(allowed)}")


def boot_setting(system: JSON) -> BootSetting:
    boot = system.get("Boot") or {}
    enabled = boot.get("BootSourceOverrideEnabled")
    target = str(boot.get("BootSourceOverrideTarget") or "None")
    device = BootDevice.NONE if enabled == "Disabled" else BOOT_TARGET_FROM_REDFISH.get(
        target, BootDevice.NONE)
    persistent = {"Once": False, "Continuous": True}.get(str(enabled))
    mode = BOOT_MODE_FROM_REDFISH.get(str(boot.get("BootSourceOverrideMode")))
    return BootSetting(device=device, persistent=persistent, mode=mode)


def boot_patch_body(device: BootDevice, persistent: bool, mode: BootMode,
                    quirks: Quirks) -> JSON:
    boot: JSON = {
        "BootSourceOverrideTarget": BOOT_TARGET_TO_REDFISH[device],
        "BootSourceOverrideEnabled": "Continuous" if persistent else "Once",
    }
    if device is BootDevice.NONE:
        boot["BootSourceOverrideEnabled"] = "Disabled"
    if quirks.send_boot_mode:
        boot["BootSourceOverrideMode"] = BOOT_MODE_TO_REDFISH[mode]
    return {"Boot": boot}


def boot_took(got: BootSetting, sent: JSON, quirks: Quirks, *, device: BootDevice,
              persistent: bool, mode: BootMode) -> bool:
    if got.device is not device:
        return False
    if "BootSourceOverrideMode" in sent["Boot"] and got.mode is not None and got.mode is not mode:
        return False
    if quirks.reports_override_enabled and device is not BootDevice.NONE:
        return got.persistent is persistent
    return True


def _odata_ids(collection: JSON | None) -> list[str]:
    if not collection:
        return []
    return [m["@odata.id"] for m in collection.get("Members", []) if "@odata.id" in m]


def gpus_from_processors(processors: Iterable[JSON]) -> tuple[Gpu, ...]:
    counts: Counter[str] = Counter()
    for p in processors:
        if str(p.get("ProcessorType", "")).upper() != "GPU":
            continue
        state = (p.get("Status") or {}).get("State")
        if state == "Absent":
            continue
        counts[str(p.get("Model") or p.get("Name") or "GPU")] += 1
    return tuple(Gpu(model=m, count=c) for m, c in sorted(counts.items()))


GPU_VENDOR_IDS = {"0x10de"}  # NVIDIA PCI vendor id


def gpus_from_pcie(devices: Iterable[JSON]) -> tuple[Gpu, ...]:
    """GPUs among PCIeDevices: DeviceType GPU, or NVIDIA 3D/VGA controllers."""
    counts: Counter[str] = Counter()
    for d in devices:
        kind = str(d.get("DeviceType", ""))
        name = str(d.get("Model") or d.get("Name") or "")
        vendor_id = str((d.get("Oem") or {}).get("VendorId") or d.get("VendorId") or "").lower()
        looks_gpu = kind.upper() == "GPU" or (
            vendor_id in GPU_VENDOR_IDS and str(d.get("ClassCode", "")).startswith("0x03"))
        if looks_gpu:
            counts[name or "GPU"] += 1
    return tuple(Gpu(model=m, count=c) for m, c in sorted(counts.items()))


def nic_facts(interfaces: Iterable[JSON]) -> tuple[NicFact, ...]:
    out = []
    for nic in interfaces:
        mac = nic.get("MACAddress") or nic.get("PermanentMACAddress")
        speed = nic.get("SpeedMbps")
        out.append(NicFact(name=str(nic.get("Id") or nic.get("Name") or "nic"),
                           mac=str(mac).lower() if mac else None,
                           speed_mbps=int(speed) if isinstance(speed, int | float) else None))
    return tuple(out)


def psu_facts(power: JSON | None, subsystem_psus: Iterable[JSON] = ()) -> tuple[PsuFact, ...]:
    out = []
    for psu in (power or {}).get("PowerSupplies", []) or []:
        out.append(_psu(psu, psu.get("PowerCapacityWatts")))
    for psu in subsystem_psus:
        out.append(_psu(psu, psu.get("PowerCapacityWatts")))
    return tuple(out)


def _psu(psu: JSON, capacity: Any) -> PsuFact:
    health = (psu.get("Status") or {}).get("Health")
    return PsuFact(name=str(psu.get("Name") or psu.get("MemberId") or psu.get("Id") or "psu"),
                   capacity_w=float(capacity) if isinstance(capacity, int | float) else None,
                   healthy=None if health is None else health == "OK")


def facts_from(system: JSON, processors: Iterable[JSON] = (), interfaces: Iterable[JSON] = (),
               pcie_devices: Iterable[JSON] = (), psus: tuple[PsuFact, ...] = ()
               ) -> HardwareFacts:
    procs = list(processors)
    summary = system.get("ProcessorSummary") or {}
    memory = system.get("MemorySummary") or {}
    gpus = gpus_from_processors(procs) or gpus_from_pcie(pcie_devices)
    cpu_models = [p.get("Model") for p in procs
                  if str(p.get("ProcessorType", "CPU")).upper() == "CPU" and p.get("Model")]
    mem = memory.get("TotalSystemMemoryGiB")
    count = summary.get("Count")
    return HardwareFacts(
        vendor=system.get("Manufacturer"), model=system.get("Model"),
        serial=system.get("SerialNumber"),
        cpu_count=int(count) if isinstance(count, int | float) else None,
        cpu_model=summary.get("Model") or (cpu_models[0] if cpu_models else None),
        memory_gib=float(mem) if isinstance(mem, int | float) else None,
        gpus=gpus, nics=nic_facts(interfaces), psus=psus, power_state=power_state(system),
    )


def power_watts(environment: JSON | None = None, legacy_power: JSON | None = None,
                psu_metrics: Iterable[JSON] = ()) -> float | None:
    """Input power: EnvironmentMetrics.PowerWatts, else legacy PowerControl, else PSU sum.

    DMTF deprecated Power/Thermal in 2020.4 for PowerSubsystem/EnvironmentMetrics; some BMCs
    only have the new model (Supermicro X14), others only the old one, so read both.
    """
    reading = ((environment or {}).get("PowerWatts") or {}).get("Reading")
    if isinstance(reading, int | float):
        return float(reading)
    for ctl in (legacy_power or {}).get("PowerControl", []) or []:
        consumed = ctl.get("PowerConsumedWatts")
        if isinstance(consumed, int | float):
            return float(consumed)
    total, seen = 0.0, False
    for m in psu_metrics:
        value = (m.get("InputPowerWatts") or {}).get("Reading")
        if isinstance(value, int | float):
            total += float(value)
            seen = True
    return total if seen else None


# ---------------------------------------------------------------- TLS pinning


class _PinnedAdapter(HTTPAdapter):
    """Accept exactly the certificate with this SHA-256 fingerprint (self-signed BMCs)."""

    def __init__(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint.replace(":", "").lower()
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["assert_fingerprint"] = self._fingerprint
        super().init_poolmanager(*args, **kwargs)


# ---------------------------------------------------------------- the driver


class RedfishDriver:
    """One node's Redfish BMC."""

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
        t = self.target
        conn = Connector(self.base_url, verify=self._verify(),
                         default_request_timeout=t.request_timeout_s,
                         connect_timeout=t.request_timeout_s)
        # What the BMC last answered, for protocol errors raised inside sushy.
        conn._session.hooks["response"].append(self._remember_answer)
        # sushy's Connector turns urllib3's InsecureRequestWarning off for the whole process
        # when verify is off; an inventory with tls.verify false keeps hearing about it.
        warnings.simplefilter("default", InsecureRequestWarning)
        if t.tls.fingerprint_sha256:
            # sushy's Connector has no public hook for an adapter; its requests session does.
            conn._session.mount("https://", _PinnedAdapter(t.tls.fingerprint_sha256))
        if t.scheme == "http":
            # Plain HTTP only where the inventory says so explicitly (the lab, whose emulator
            # has no SessionService): basic auth, no service-root round trip.
            conn.set_http_basic_auth(t.username, t.password.reveal())
        else:
            # Sessions over HTTPS: real BMCs limit and expire them; sushy falls back to basic.
            auth = sushy_auth.SessionOrBasicAuth(username=t.username,
                                                 password=t.password.reveal())
            self._root = self._call(lambda: sushy.Sushy(
                self.base_url, auth=auth, connector=conn, verify=self._verify(),
                server_side_retries=0, read_timeout=t.request_timeout_s,
                connect_timeout=t.request_timeout_s))
        self._conn = conn
        return conn

    def _call(self, fn: Callable[[], T]) -> T:
        """Run a sushy/requests call, mapping its exceptions onto the BmcError family."""
        node = self.target.node
        try:
            return fn()
        except BmcError:
            raise
        except sushy_exc.AccessError as exc:
            raise BmcAuthError(f"{node}: BMC refused the credentials (HTTP {exc.status_code})",
                               hint="check the username and the password reference") from None
        except sushy_exc.HTTPError as exc:
            status = exc.status_code
            detail = _short(getattr(exc, "detail", None) or exc.message)
            if status == 404:
                raise BmcUnsupported(f"{node}: {detail} (HTTP 404)") from None
            raise BmcRefused(f"{node}: BMC answered HTTP {status}: {detail}",
                             status=status) from None
        except sushy_exc.ConnectionError as exc:
            raise _connection_error(node, self.base_url, exc) from None
        except requests.exceptions.JSONDecodeError:  # a subclass of RequestException
            status, ctype = self._last_answer or (None, "an unknown content type")
            raise BmcProtocolError(
                f"{node}: BMC answered HTTP {status} with {_short(ctype)[:80]}, not JSON "
                "(a protocol error: not a Redfish response)", status=status,
                content_type=ctype, hint=_NOT_REDFISH) from None
        except requests.exceptions.RequestException as exc:
            raise _connection_error(node, self.base_url, exc) from None
        except (sushy_exc.MissingAttributeError, sushy_exc.MissingActionError,
                sushy_exc.InvalidParameterValueError, sushy_exc.ArchiveParsingError) as exc:
            raise BmcUnsupported(f"{node}: {_short(str(exc))}") from None
        except sushy_exc.SushyError as exc:
            raise BmcRefused(f"{node}: {_short(str(exc))}") from None

    def _remember_answer(self, resp: requests.Response, *args: Any, **kwargs: Any) -> None:
        self._last_answer = (resp.status_code, resp.headers.get("Content-Type") or
                             "no Content-Type")

    def _retry(self, fn: Callable[[], T], deadline: float | None = None,
               policy: RetryPolicy | None = None) -> T:
        return retry(lambda: self._call(fn), policy or self.retry_policy, sleep=self._sleep,
                     deadline=deadline)

    def _get(self, path: str) -> JSON:
        conn = self._connect()
        return _json_body(self.target.node, self._retry(lambda: conn.get(path)))

    def _get_with_etag(self, path: str) -> tuple[JSON, str | None]:
        conn = self._connect()
        resp = self._retry(lambda: conn.get(path))
        return _json_body(self.target.node, resp), resp.headers.get("ETag")

    def _system_uri(self) -> str:
        if self._system_path:
            return self._system_path
        if self.target.system_id:
            self._system_path = f"/redfish/v1/Systems/{self.target.system_id}"
            return self._system_path
        members = _odata_ids(self._get("/redfish/v1/Systems"))
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

    # -------------------------------------------------------- power

    def get_power_state(self) -> PowerState:
        return power_state(self._system(fresh=True))

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        start = time.monotonic()
        deadline = start + timeout_s
        system = self._system()
        quirks = self.quirks(system)
        current = power_state(system)
        target = ACTION_TARGET[action]
        if action in (PowerAction.ON, PowerAction.OFF, PowerAction.SOFT_OFF) and current is target:
            return current
        if action is PowerAction.CYCLE and current is PowerState.OFF:
            action = PowerAction.ON
        reset = choose_reset_type(action, allowed_reset_types(system))
        path = reset_target(system) or f"{self._system_uri()}/Actions/ComputerSystem.Reset"
        conn = self._connect()
        policy = self.retry_policy
        if action is PowerAction.ON and quirks.power_on_conflict_retries:
            policy = RetryPolicy(policy.attempts + quirks.power_on_conflict_retries,
                                 policy.base_delay_s, policy.max_delay_s)
        def send() -> None:
            self._retry(lambda: conn.post(path, data={"ResetType": reset}), deadline, policy)
            self._snapshot = None

        remaining = max(1.0, deadline - time.monotonic())
        return request_power(send, self.get_power_state, target, remaining,
                             node=self.target.node, what=reset,
                             interval_s=self.poll_interval_s, max_interval_s=2.0,
                             sleep=self._sleep)

    # -------------------------------------------------------- boot

    def get_boot_device(self) -> BootSetting:
        return boot_setting(self._system(fresh=True))

    def set_boot_device(self, device: BootDevice, *, persistent: bool = False,
                        mode: BootMode = BootMode.UEFI) -> BootSetting:
        path = self._system_uri()
        system, etag = self._get_with_etag(path)
        quirks = self.quirks(system)
        body = boot_patch_body(device, persistent, mode, quirks)
        allowed = (system.get("Boot") or {}).get(
            "BootSourceOverrideTarget@Redfish.AllowableValues")
        wanted = body["Boot"]["BootSourceOverrideTarget"]
        if isinstance(allowed, list) and allowed and wanted not in allowed \
                and device is not BootDevice.NONE:
            raise BmcUnsupported(f"{self.target.node}: boot target {wanted} not in "
                                 f"{', '.join(map(str, allowed))}")
        conn = self._connect()
        busy = RetryPolicy(self.retry_policy.attempts + 2, 1.0, 10.0)
        got = boot_setting(system)
        for _ in range(quirks.boot_patch_attempts):
            def patch(tag: str | None = etag) -> Any:
                try:
                    return conn.patch(path, data=body, etag=tag)
                except sushy_exc.HTTPError as exc:
                    if exc.status_code in quirks.boot_patch_busy_statuses:
                        raise BmcRefused(f"{self.target.node}: BMC busy (HTTP "
                                         f"{exc.status_code}); retrying", status=409) from None
                    raise
            self._retry(patch, policy=busy)
            system, etag = self._get_with_etag(path)
            self._remember(system)
            got = boot_setting(system)
            if boot_took(got, body, quirks, device=device, persistent=persistent, mode=mode):
                return got
        raise BmcRefused(
            f"{self.target.node}: boot override did not take: asked {device.value} "
            f"({'persistent' if persistent else 'once'}, {mode.value}); the BMC reports "
            f"{got.device.value} (persistent={got.persistent}, mode="
            f"{got.mode.value if got.mode else 'unknown'})")

    # -------------------------------------------------------- inspection

    def _members(self, link: JSON | None) -> list[JSON]:
        if not link or "@odata.id" not in link:
            return []
        return [self._get(p) for p in _odata_ids(self._get(link["@odata.id"]))]

    def _chassis_paths(self, system: JSON) -> list[str]:
        links = (system.get("Links") or {}).get("Chassis") or []
        return [c["@odata.id"] for c in links if "@odata.id" in c]

    def hardware_facts(self) -> HardwareFacts:
        system = self._system(fresh=True)
        processors = self._members(system.get("Processors"))
        interfaces = self._members(system.get("EthernetInterfaces"))
        pcie: list[JSON] = []
        psus: tuple[PsuFact, ...] = ()
        for chassis_path in self._chassis_paths(system)[:1]:
            chassis = self._get(chassis_path)
            if not gpus_from_processors(processors):
                pcie = self._members(chassis.get("PCIeDevices"))
            power = self._optional(chassis.get("Power"))
            subsystem = self._optional(chassis.get("PowerSubsystem"))
            sub_psus = self._members((subsystem or {}).get("PowerSupplies"))
            psus = psu_facts(power, sub_psus)
        return facts_from(system, processors, interfaces, pcie, psus)

    def _optional(self, link: JSON | None) -> JSON | None:
        if not link or "@odata.id" not in link:
            return None
        try:
            return self._get(link["@odata.id"])
        except BmcUnsupported:
            return None

    def power_reading_w(self) -> float | None:
        system = self._system()
        for chassis_path in self._chassis_paths(system):
            chassis = self._get(chassis_path)
            env = self._optional(chassis.get("EnvironmentMetrics"))
            legacy = self._optional(chassis.get("Power"))
            metrics: list[JSON] = []
            if env is None and legacy is None:
                subsystem = self._optional(chassis.get("PowerSubsystem"))
                for psu in self._members((subsystem or {}).get("PowerSupplies")):
                    m = self._optional(psu.get("Metrics"))
                    if m:
                        metrics.append(m)
            watts = power_watts(env, legacy, metrics)
            if watts is not None:
                return watts
        return None

    # -------------------------------------------------------- virtual media

    def _cd_media(self) -> JSON:
        system = self._system()
        links = [system.get("VirtualMedia")]
        for manager in (system.get("Links") or {}).get("ManagedBy") or []:
            mgr = self._optional(manager)
            if mgr:
                links.append(mgr.get("VirtualMedia"))
        for link in links:
            for media in self._members(link):
                types = [str(t).upper() for t in media.get("MediaTypes") or []]
                if {"CD", "DVD"} & set(types) or str(media.get("Id", "")).lower() in ("cd", "cd1"):
                    return media
        raise BmcUnsupported(f"{self.target.node}: no CD/DVD virtual media device")

    def insert_virtual_media(self, image_url: str) -> None:
        media = self._cd_media()
        conn = self._connect()
        action = ((media.get("Actions") or {}).get("#VirtualMedia.InsertMedia") or {}).get(
            "target")
        body = {"Image": image_url, "Inserted": True, "WriteProtected": True}
        if self.quirks().virtual_media_via_patch or not action:
            self._retry(lambda: conn.patch(media["@odata.id"], data=body))
        else:
            self._retry(lambda: conn.post(action, data=body))

    def eject_virtual_media(self) -> None:
        media = self._cd_media()
        conn = self._connect()
        action = ((media.get("Actions") or {}).get("#VirtualMedia.EjectMedia") or {}).get(
            "target")
        if self.quirks().virtual_media_via_patch or not action:
            self._retry(lambda: conn.patch(media["@odata.id"],
                                           data={"Image": None, "Inserted": False}))
        else:
            self._retry(lambda: conn.post(action, data={}))

    def close(self) -> None:
        root, self._root, self._conn = self._root, None, None
        if root is not None:
            with contextlib.suppress(Exception):  # best effort: the BMC expires sessions
                root._auth.close()  # deletes a Redfish session if one was made


_NOT_REDFISH = "check that the address and port are the BMC's Redfish service"


def _json_body(node: str, resp: requests.Response) -> JSON:
    """A Redfish resource: a JSON object, or a protocol error naming status and content type."""
    ctype = resp.headers.get("Content-Type") or "no Content-Type"
    try:
        body = resp.json()
    except ValueError:
        raise BmcProtocolError(
            f"{node}: BMC answered HTTP {resp.status_code} with {_short(ctype)[:80]}, not JSON "
            "(a protocol error: not a Redfish response)", status=resp.status_code,
            content_type=ctype, hint=_NOT_REDFISH) from None
    if not isinstance(body, dict):
        raise BmcProtocolError(
            f"{node}: BMC answered HTTP {resp.status_code} with JSON that is not a JSON object "
            "(a protocol error: not a Redfish resource)", status=resp.status_code,
            content_type=ctype, hint=_NOT_REDFISH)
    return body


def _short(text: str) -> str:
    return " ".join(str(text).split())[:300]


def _connection_error(node: str, url: str, exc: Exception) -> BmcError:
    text = str(exc)
    lowered = text.lower()
    if "certificate" in lowered or "ssl" in lowered or "fingerprint" in lowered:
        err: BmcError = BmcUnreachable(
            f"{node}: TLS verification of {url} failed",
            hint="give the site's CA in bmc.tls.ca_bundle, or pin the BMC's certificate with "
                 "bmc.tls.fingerprint_sha256")
        err.transient = False
        return err
    if "timed out" in lowered or "timeout" in lowered:
        return BmcTimeout(f"{node}: no answer from {url} in time")
    return BmcUnreachable(f"{node}: cannot connect to {url}",
                          hint="check the address, port and that the BMC is powered")
