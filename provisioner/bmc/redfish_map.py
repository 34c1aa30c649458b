"""Redfish JSON -> the neutral vocabulary of bmc/base.py, as tables and pure functions.

Kept apart from the driver so the mapping can be tested without a BMC or sushy: unit tests
feed these functions captured Dell, HPE, Supermicro and Lenovo payloads. What belongs here:
value tables and functions of payloads only (no I/O, no sushy, no requests).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from provisioner.bmc.base import (
    BootDevice,
    BootMode,
    BootSetting,
    Gpu,
    HardwareFacts,
    NicFact,
    PowerAction,
    PowerState,
    PsuFact,
)
from provisioner.bmc.quirks import Quirks
from provisioner.errors import BmcUnsupported

JSON = dict[str, Any]

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
# System EthernetInterfaces that are the Redfish host interface's host side, not a port
# (Supermicro: "ToManager", "Host Ethernet Interface"; ansible community.general PR #3693).
HOST_INTERFACE_IDS = frozenset({"tomanager"})
# NetworkDeviceFunction.BootMode values that network-boot the function (NetworkDeviceFunction
# v1.x BootMode: Disabled, PXE, iSCSI, FibreChannel, FibreChannelOverEthernet, HTTP).
NETWORK_BOOT_MODES = frozenset({"PXE", "HTTP"})
_DEVICE_PATH_MAC = re.compile(r"MAC\(([0-9A-Fa-f]{12})\s*[,)]")

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
                    quirks: Quirks, now: JSON) -> JSON:
    """The boot override PATCH, given the system's `Boot` object as the BMC has it now. Mode
    goes in only where the BMC has the property and it differs (or a quirk says always):
    iDRAC queues a BIOS job, an extra reboot, for every Mode written (metal-operator #81)."""
    allowed = now.get("BootSourceOverrideTarget@Redfish.AllowableValues")
    target = BOOT_TARGET_TO_REDFISH[device]
    if device is BootDevice.CD and (not isinstance(allowed, list)
                                    or quirks.cd_boot_target in allowed):
        target = quirks.cd_boot_target
    boot: JSON = {
        "BootSourceOverrideTarget": target,
        "BootSourceOverrideEnabled": "Continuous" if persistent else "Once",
    }
    if device is BootDevice.NONE:
        boot["BootSourceOverrideEnabled"] = "Disabled"
    wanted = BOOT_MODE_TO_REDFISH[mode]
    has_mode = "BootSourceOverrideMode" in now
    if quirks.send_boot_mode and (quirks.boot_mode_every_patch or (
            has_mode and now["BootSourceOverrideMode"] != wanted)):
        boot["BootSourceOverrideMode"] = wanted
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


def mounted(media: JSON, image_url: str) -> bool:
    """Whether a VirtualMedia resource shows this image in. Some BMCs report Image as the
    file's name rather than the URL, or leave Inserted out."""
    image = str(media.get("Image") or media.get("ImageName") or "")
    same = image == image_url or (bool(image) and
                                  image.rsplit("/", 1)[-1] == image_url.rsplit("/", 1)[-1])
    inserted = media.get("Inserted")
    return (inserted is True and (same or not image)) or (inserted is None and same)


def odata_ids(collection: JSON | None) -> list[str]:
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


def _mac_of(nic: JSON) -> str | None:
    mac = nic.get("MACAddress") or nic.get("PermanentMACAddress")
    return str(mac).lower() if mac else None


def _vlan_on(nic: JSON) -> bool:
    vlan = nic.get("VLAN") or {}
    return isinstance(vlan, dict) and vlan.get("VLANEnable") is True


def physical_interfaces(interfaces: Iterable[JSON]) -> list[JSON]:
    """The system's EthernetInterfaces that are NIC ports. Left out: the host side of the
    Redfish host interface (the USB NIC to the BMC: DSP0270; Supermicro lists it as
    "ToManager"), interfaces the BMC marks `EthernetInterfaceType: Virtual` (EthernetInterface
    v1.6), and a VLAN sub-interface listed beside its port (VLAN enabled, the port's MAC)."""
    listed = [n for n in interfaces
              if str(n.get("Id") or "").lower() not in HOST_INTERFACE_IDS
              and str(n.get("EthernetInterfaceType") or "").lower() != "virtual"]
    untagged = {_mac_of(n) for n in listed if not _vlan_on(n)}
    return [n for n in listed if not (_vlan_on(n) and _mac_of(n) in untagged)]


def nic_facts(interfaces: Iterable[JSON]) -> tuple[NicFact, ...]:
    out = []
    for nic in physical_interfaces(interfaces):
        speed = nic.get("SpeedMbps")
        out.append(NicFact(name=str(nic.get("Id") or nic.get("Name") or "nic"),
                           mac=_mac_of(nic),
                           speed_mbps=int(speed) if isinstance(speed, int | float) else None))
    return tuple(out)


def function_links(nic: JSON) -> list[str]:
    """The NetworkDeviceFunctions an EthernetInterface links to (Links.NetworkDeviceFunctions,
    or the older single Links.NetworkDeviceFunction)."""
    links = nic.get("Links") or {}
    many = links.get("NetworkDeviceFunctions")
    refs = many if isinstance(many, list) else [links.get("NetworkDeviceFunction")]
    return [str(r["@odata.id"]) for r in refs if isinstance(r, dict) and "@odata.id" in r]


def network_boot_function(function: JSON) -> str | None:
    """The MAC of a NetworkDeviceFunction set to network-boot (BootMode PXE or HTTP),
    else None."""
    if str(function.get("BootMode") or "") not in NETWORK_BOOT_MODES:
        return None
    eth = function.get("Ethernet") or {}
    mac = eth.get("MACAddress") or eth.get("PermanentMACAddress")
    return str(mac).lower() if mac else None


def network_boot_macs(system: JSON, options: Iterable[JSON]) -> list[tuple[int, str]]:
    """(place in the system's Boot.BootOrder, MAC) of every enabled network boot option,
    in boot order: a UEFI network boot option's device path names its NIC by a MAC node
    ("MAC(3CECEF0A1B2C,0x1)/IPv4(...)", UEFI spec, "Text device node reference"). An
    option the BootOrder does not list ranks after every listed one."""
    order = [str(o) for o in ((system.get("Boot") or {}).get("BootOrder") or [])]
    rank = {ref: i for i, ref in enumerate(order)}
    out = []
    for opt in options:
        if opt.get("BootOptionEnabled") is False:
            continue
        m = _DEVICE_PATH_MAC.search(str(opt.get("UefiDevicePath") or ""))
        if m is None:
            continue
        digits = m.group(1).lower()
        mac = ":".join(digits[i:i + 2] for i in range(0, 12, 2))
        out.append((rank.get(str(opt.get("BootOptionReference") or opt.get("Id")),
                             len(order)), mac))
    return sorted(out)


def management_nic(nics: Sequence[NicFact], pxe_functions: Sequence[str] = (),
                   boot_macs: Sequence[tuple[int, str]] = ()) -> tuple[str | None, str]:
    """(MAC, how the BMC said so) of the NIC the node network-boots from: the management
    NIC the provisioning DHCP server must know. Never the sort order of the MACs (a GPU
    node's RoCE ports often sort first). (None, why) when the BMC does not say."""
    ports = {n.mac for n in nics if n.mac}
    if not ports:
        return None, "the BMC reports no NIC ports"
    functions = [m for m in dict.fromkeys(pxe_functions) if m in ports]
    if len(functions) == 1:
        return functions[0], "the only NIC whose network device function boots by PXE/HTTP"
    booting = [(r, m) for r, m in boot_macs if m in ports
               and (len(functions) < 2 or m in functions)]
    macs = list(dict.fromkeys(m for _r, m in booting))
    if len(macs) == 1:
        return macs[0], "the only NIC among the BMC's network boot options"
    if len(macs) > 1 and booting[0][0] < next(r for r, m in booting if m != booting[0][1]):
        return booting[0][1], (f"the first of {len(macs)} NICs in the BMC's network boot "
                               "options, by its BootOrder")
    if macs or functions:
        return None, (f"{len(macs) or len(functions)} NICs network-boot and the BMC's "
                      "BootOrder does not rank one first")
    return None, ("the BMC names no network-boot NIC (no network boot option with a MAC in "
                  "its device path, no NetworkDeviceFunction with BootMode PXE)")


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


def nvswitches_from(chassis: JSON) -> int | None:
    """NVSwitches among the chassis' Links.Switches (Chassis v1.7+; HGX baseboards link the
    NVLink fabric's switches there); None where the chassis links no switches at all."""
    links = (chassis.get("Links") or {}).get("Switches")
    if not isinstance(links, list):
        return None
    return sum(1 for link in links
               if any(k in str(link.get("@odata.id", "")).lower() for k in ("nvswitch", "nvlink")))


def facts_from(system: JSON, processors: Iterable[JSON] = (), interfaces: Iterable[JSON] = (),
               pcie_devices: Iterable[JSON] = (), psus: tuple[PsuFact, ...] = (),
               nvswitch_count: int | None = None, boot_options: Iterable[JSON] = (),
               pxe_functions: Sequence[str] = ()) -> HardwareFacts:
    """`pxe_functions`: the MACs of the NICs' network-boot NetworkDeviceFunctions."""
    procs = list(processors)
    nics = nic_facts(interfaces)
    mgmt_mac, mgmt_how = management_nic(nics, pxe_functions,
                                        network_boot_macs(system, boot_options))
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
        gpus=gpus, nics=nics, psus=psus, power_state=power_state(system),
        nvswitch_count=nvswitch_count, mgmt_mac=mgmt_mac, mgmt_mac_how=mgmt_how,
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
