"""Redfish driver on sushy.

sushy supplies the transport: its Connector (requests session, basic or session auth,
ETag/If-Match workarounds, typed HTTP errors) and the service root. This module holds the
driver's Redfish logic (which resources to read and write, vendor quirks, retries); the
payload mapping is in redfish_map.py, the connection and error translation in
redfish_http.py, and the plumbing every operation stands on (retries, GETs, the system and
its snapshot, quirks) in redfish_base.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from sushy import exceptions as sushy_exc
from sushy.resources.manager.virtual_media import VirtualMedia

from provisioner.bmc import firmware
from provisioner.bmc.base import (
    ACTION_TARGET,
    BootDevice,
    BootMode,
    BootSetting,
    FirmwareFact,
    HardwareFacts,
    PowerAction,
    PowerState,
    PsuFact,
    answered,
    power_cycle,
    request_power,
    send_once,
)
from provisioner.bmc.redfish_base import RedfishBase
from provisioner.bmc.redfish_map import (
    JSON,
    allowed_reset_types,
    boot_patch_body,
    boot_setting,
    boot_took,
    choose_reset_type,
    facts_from,
    function_links,
    gpus_from_processors,
    mounted,
    network_boot_function,
    nvswitches_from,
    odata_ids,
    physical_interfaces,
    power_state,
    power_watts,
    psu_facts,
    reset_target,
)
from provisioner.bmc.retry import RetryPolicy, poll_until
from provisioner.errors import BmcError, BmcRefused, BmcUnsupported


class RedfishDriver(RedfishBase):
    """One node's Redfish BMC."""

    # How long a mounted image may take to show as inserted.
    MEDIA_SETTLE_S = 30.0

    # -------------------------------------------------------- power

    def get_power_state(self) -> PowerState:
        return power_state(self._system(fresh=True))

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        if action is PowerAction.CYCLE:
            return power_cycle(self.set_power, timeout_s)
        start = time.monotonic()
        deadline = start + timeout_s
        system = self._system()
        quirks = self.quirks(system)
        current = power_state(system)
        target = ACTION_TARGET[action]
        if action in (PowerAction.ON, PowerAction.OFF, PowerAction.SOFT_OFF) and current is target:
            return current
        reset = choose_reset_type(action, allowed_reset_types(system))
        path = reset_target(system) or f"{self._system_uri()}/Actions/ComputerSystem.Reset"
        conn = self._connect()
        policy = self.retry_policy
        if action is PowerAction.ON and quirks.power_on_conflict_retries:
            policy = RetryPolicy(policy.attempts + quirks.power_on_conflict_retries,
                                 policy.base_delay_s, policy.max_delay_s)
        def send() -> None:
            self._snapshot = None
            self._retry(lambda: conn.post(path, data={"ResetType": reset}), deadline, policy,
                        only=answered)

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
        now = system.get("Boot") or {}
        body = boot_patch_body(device, persistent, mode, quirks, now)
        allowed = now.get("BootSourceOverrideTarget@Redfish.AllowableValues")
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
        return [self._get(p) for p in odata_ids(self._get(link["@odata.id"]))]

    def _chassis_paths(self, system: JSON) -> list[str]:
        links = (system.get("Links") or {}).get("Chassis") or []
        return [c["@odata.id"] for c in links if "@odata.id" in c]

    def hardware_facts(self) -> HardwareFacts:
        system = self._system(fresh=True)
        processors = self._members(system.get("Processors"))
        interfaces = self._members(system.get("EthernetInterfaces"))
        pcie: list[JSON] = []
        psus: tuple[PsuFact, ...] = ()
        nvswitches: int | None = None
        for chassis_path in self._chassis_paths(system)[:1]:
            chassis = self._get(chassis_path)
            if not gpus_from_processors(processors):
                pcie = self._members(chassis.get("PCIeDevices"))
            power = self._optional(chassis.get("Power"))
            subsystem = self._optional(chassis.get("PowerSubsystem"))
            sub_psus = self._members((subsystem or {}).get("PowerSupplies"))
            psus = psu_facts(power, sub_psus)
            nvswitches = nvswitches_from(chassis)
        facts = facts_from(system, processors, interfaces, pcie, psus, nvswitches,
                           boot_options=self._boot_options(system),
                           pxe_functions=self._network_boot_functions(interfaces))
        return replace(facts, firmware=self._firmware(system))

    def _firmware(self, system: JSON) -> tuple[FirmwareFact, ...]:
        """The UpdateService's FirmwareInventory, else the system's and managers' versions
        (bmc/firmware.py); a BMC that refuses or lacks either tells nothing of it."""
        root = (self._root.json if self._root is not None else None) or {}
        # Versions are facts beside the rest: a read that fails (a 500 while an update runs,
        # a 403 for a role without the privilege, a timeout, a malformed collection) leaves
        # them out rather than failing the node's inspection.
        try:
            service = self._extra(root.get("UpdateService")
                                  or {"@odata.id": "/redfish/v1/UpdateService"})
            collection = self._extra((service or {}).get("FirmwareInventory"))
            inventory = [item for path in odata_ids(collection or {})
                         if (item := self._extra({"@odata.id": path})) is not None]
        except (BmcError, TypeError, AttributeError):
            inventory = []
        try:
            managers = [m for link in (system.get("Links") or {}).get("ManagedBy") or []
                        if isinstance(link, dict) and (m := self._extra(link)) is not None]
        except (BmcError, TypeError, AttributeError):
            managers = []
        return firmware.from_redfish(inventory, system, managers)

    def _boot_options(self, system: JSON) -> list[JSON]:
        """The system's BootOptions (ComputerSystem v1.5+); none where the BMC has none."""
        collection = self._extra((system.get("Boot") or {}).get("BootOptions"))
        out = []
        for path in odata_ids(collection):
            option = self._extra({"@odata.id": path})
            if option is not None:
                out.append(option)
        return out

    def _network_boot_functions(self, interfaces: list[JSON]) -> list[str]:
        """The MACs of the NetworkDeviceFunctions, linked from the system's NIC ports, that
        are set to network-boot."""
        out = []
        for nic in physical_interfaces(interfaces):
            for path in function_links(nic):
                function = self._extra({"@odata.id": path})
                mac = network_boot_function(function) if function is not None else None
                if mac is not None:
                    out.append(mac)
        return out

    def _extra(self, link: JSON | None) -> JSON | None:
        """A resource that only tells the management NIC: one the BMC refuses (a licence,
        a 403) tells nothing, and the rest of the facts still count."""
        try:
            return self._optional(link)
        except BmcRefused:
            return None

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
        """Mount the image and read it back. A resumed run finds its own image in and leaves
        it; another image is ejected first (community.general #6969). The InsertMedia action
        goes through sushy's VirtualMedia, which knows the vendors' variants: no Inserted or
        WriteProtected for Supermicro X11, TransferProtocolType or credentials where a BMC
        asks for them (NVIDIA DGX). A BMC without the action is PATCHed."""
        media = self._cd_media()
        if mounted(media, image_url):
            return
        if media.get("Inserted") or media.get("Image"):
            self._eject(media)
        path = str(media["@odata.id"])
        if self._media_by_patch(media, "#VirtualMedia.InsertMedia"):
            insert = self._patch_fresh(path, {"Image": image_url, "Inserted": True,
                                              "WriteProtected": True})
        else:
            insert = partial(self._media_device(path).insert_media, image_url)
        send_once(lambda: self._retry(insert, only=answered))
        got = poll_until(lambda: self._get(path), lambda m: mounted(m, image_url),
                         time.monotonic() + self.MEDIA_SETTLE_S,
                         interval_s=self.poll_interval_s, max_interval_s=5.0,
                         sleep=self._sleep)
        if not mounted(got, image_url):
            raise BmcRefused(f"{self.target.node}: virtual media did not take: the BMC "
                             f"reports Inserted={got.get('Inserted')}, Image="
                             f"{got.get('Image')} after {self.MEDIA_SETTLE_S:g} s")

    def eject_virtual_media(self) -> None:
        self._eject(self._cd_media())

    def _eject(self, media: JSON) -> None:
        path = str(media["@odata.id"])
        if self._media_by_patch(media, "#VirtualMedia.EjectMedia"):
            self._retry(self._patch_fresh(path, {"Image": None, "Inserted": False}))
        else:  # sushy's eject also knows iLO's wish for an empty JSON body
            self._retry(self._media_device(path).eject_media)

    def _media_by_patch(self, media: JSON, action: str) -> bool:
        """PATCH the VirtualMedia resource where the quirk says so (Lenovo XCC) or the BMC
        lists no such action (sushy PATCHes only when the BMC answers `Allow: PATCH`)."""
        target = ((media.get("Actions") or {}).get(action) or {}).get("target")
        return self.quirks().virtual_media_via_patch or not target

    def _media_device(self, path: str) -> VirtualMedia:
        conn = self._connect()
        return self._call(lambda: VirtualMedia(conn, path))

    def _patch_fresh(self, path: str, data: JSON) -> Callable[[], object]:
        """A PATCH of the resource with the ETag read just before it (again at each retry:
        an ETag read before a refused attempt may be stale)."""
        conn = self._connect()

        def patch() -> object:
            _, etag = self._get_with_etag(path)
            return conn.patch(path, data=data, etag=etag)
        return patch

    def close(self) -> None:
        root, self._root, self._conn = self._root, None, None
        if root is not None:
            with contextlib.suppress(Exception):  # best effort: the BMC expires sessions
                root._auth.close()  # deletes a Redfish session if one was made
