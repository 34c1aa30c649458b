"""The lab's Redfish hardware shapes: what a building block looks like through its BMC.

sushy-tools' fake driver serves systems, power, boot and virtual media, but its templates
hard-code the rest: every processor is a CPU, the chassis is a "Contoso 3500RX", and there
are no power supplies (sushy_tools/emulator/templates/processor.json and chassis.json). So
inspection and fingerprinting would have nothing real to compare. This module is a small
Redfish resource layer in front of each sushy-tools emulator: it forwards every request
unchanged (sushy-tools keeps doing authentication, power and boot) and, for the systems it
knows, adds what the block declares:

- ComputerSystem: Manufacturer, Model, SerialNumber, a link to the node's own chassis;
- Processors: the CPUs and one `ProcessorType: GPU` member per GPU (model and count);
- EthernetInterfaces: the management NIC (the node's MAC) and one port per block NIC port,
  with its speed; the ports' MACs (02:...) sort before the management NIC's (52:54:00:...),
  as a GPU node's ConnectX ports often sort before its onboard NIC, so nothing may take the
  first MAC for the management one;
- BootOptions: the OS disk and one UEFI PXE option whose device path names the management
  NIC's MAC, in the system's Boot.BootOrder: how a BMC says which NIC network-boots;
- Chassis `lab-<system>`: model, serial, `Links.Switches` (NVSwitches) and legacy `Power`
  with the block's PSUs and a power reading.

Resources the layer serves itself are only served after sushy-tools accepted the same
credentials for the system (a GET of the system), so the layer never widens access.

    python -m provisioner.lab.redfish_shape CONFIG.json
CONFIG: {"listen": [[port, upstream_port], ...], "systems": {system_id: shape}}
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import signal
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from provisioner.inventory.block_models import BlockType

HOST = "127.0.0.1"
JSON = dict[str, Any]
SYSTEMS = "/redfish/v1/Systems/"
CHASSIS = "/redfish/v1/Chassis/lab-"
_SYS_PATH = re.compile(r"^/redfish/v1/Systems/([^/]+)(/.*)?$")
_CHASSIS_PATH = re.compile(r"^/redfish/v1/Chassis/lab-([^/]+)(/.*)?$")


# ---------------------------------------------------------------- shapes (pure)


def vendor_model(block: BlockType) -> tuple[str, str]:
    """The (Manufacturer, Model) a block's BMC reports: DGX systems say NVIDIA and
    "DGXH100"-style models; other blocks report the block name as their model."""
    if block.name.startswith("dgx-"):
        return "NVIDIA", "DGX" + block.name[4:].upper()
    return "Lab Systems", block.name.upper()


def serial_for(key: str) -> str:
    return "LAB" + hashlib.sha1(key.encode()).hexdigest()[:9].upper()  # noqa: S324 - a name


def port_macs(key: str, count: int) -> list[str]:
    """Stable locally administered MACs for a node's data ports."""
    digest = hashlib.sha1(key.encode()).digest()  # noqa: S324 - a name
    return [f"02:{digest[0]:02x}:{digest[1]:02x}:{digest[2]:02x}:{i >> 8:02x}:{i & 255:02x}"
            for i in range(count)]


def shape(block: BlockType, key: str, mgmt_mac: str, data_macs: Sequence[str] = ()) -> JSON:
    """The hardware a node of `block` reports, as plain JSON (the layer's config): its
    data ports carry the MACs the inventory declares for them first (`data_macs`), as
    the real node's would, then lab ones; a declared port beyond the block's is added."""
    vendor, model = vendor_model(block)
    ports = [nic.speed_gbps for nic in block.nics for _ in range(nic.ports)]
    ports += [ports[-1] if ports else 25.0] * max(0, len(data_macs) - len(ports))
    macs = [*data_macs, *port_macs(key, len(ports))[len(data_macs):]]
    nics = [{"id": "mgmt", "mac": mgmt_mac, "speed_mbps": 1000}]
    nics += [{"id": f"port{i}", "mac": mac, "speed_mbps": int(speed * 1000)}
             for i, (mac, speed) in enumerate(zip(macs, ports, strict=True))]
    psu = block.psu
    return {
        "vendor": vendor, "model": model, "serial": serial_for(key),
        "gpu_model": f"NVIDIA {block.gpu.model}" if block.gpu else None,
        "gpu_count": block.gpu.count if block.gpu else 0,
        # DGX/HGX baseboards carry 4 NVSwitches (H100 generation) or 2 (B200 NVLink 5);
        # the count is not fingerprinted, only their presence.
        "nvswitch_count": 4 if block.nvswitch else 0,
        "nics": nics,
        "psu_count": psu.count if psu else 0,
        "psu_rating_w": psu.rating_w if psu else None,
        "power_w": block.typical_power_w / block.nodes_per_chassis,
    }


def _system_extra(sid: str, s: JSON) -> JSON:
    return {"Manufacturer": s["vendor"], "Model": s["model"], "SerialNumber": s["serial"],
            "Processors": {"@odata.id": f"{SYSTEMS}{sid}/Processors"},
            "EthernetInterfaces": {"@odata.id": f"{SYSTEMS}{sid}/EthernetInterfaces"}}


BOOT_ORDER = ("Boot0001", "Boot0002")  # the OS disk, then the management NIC's PXE


def _boot_extra(sid: str) -> JSON:
    """What the layer adds to the system's Boot object (sushy-tools has no BootOptions)."""
    return {"BootOptions": {"@odata.id": f"{SYSTEMS}{sid}/BootOptions"},
            "BootOrder": list(BOOT_ORDER)}


def _boot_options(sid: str, s: JSON) -> dict[str, JSON]:
    """The disk and the management NIC's UEFI PXE option (UEFI device path text form)."""
    base = f"{SYSTEMS}{sid}/BootOptions/"
    mgmt = next(n["mac"] for n in s["nics"] if n["id"] == "mgmt")
    disk = "PciRoot(0x0)/Pci(0x1D,0x0)/Pci(0x0,0x0)/NVMe(0x1,00-00-00-00-00-00-00-00)"
    pxe = (f"PciRoot(0x0)/Pci(0x1C,0x0)/Pci(0x0,0x0)/MAC({mgmt.replace(':', '').upper()},"
           "0x1)/IPv4(0.0.0.0,0x0,DHCP,0.0.0.0,0.0.0.0,0.0.0.0)")
    return {ref: {"@odata.id": base + ref, "Id": ref, "BootOptionReference": ref,
                  "DisplayName": name, "BootOptionEnabled": True, "UefiDevicePath": path}
            for ref, name, path in (("Boot0001", "ubuntu (NVMe)", disk),
                                    ("Boot0002", "UEFI PXEv4 (MAC:" + mgmt + ")", pxe))}


def _collection(path: str, name: str, members: list[str]) -> JSON:
    return {"@odata.id": path, "Name": name, "Members@odata.count": len(members),
            "Members": [{"@odata.id": m} for m in members]}


def _processors(sid: str, s: JSON) -> dict[str, JSON]:
    base = f"{SYSTEMS}{sid}/Processors/"
    out: dict[str, JSON] = {}
    for i in range(2):
        out[f"CPU{i}"] = {"@odata.id": f"{base}CPU{i}", "Id": f"CPU{i}", "ProcessorType": "CPU",
                          "Model": "Lab x86-64 CPU", "Status": {"State": "Enabled"}}
    for i in range(int(s["gpu_count"])):
        out[f"GPU{i}"] = {"@odata.id": f"{base}GPU{i}", "Id": f"GPU{i}", "ProcessorType": "GPU",
                          "Manufacturer": "NVIDIA", "Model": s["gpu_model"],
                          "Status": {"State": "Enabled", "Health": "OK"}}
    return out


def _interfaces(sid: str, s: JSON) -> dict[str, JSON]:
    base = f"{SYSTEMS}{sid}/EthernetInterfaces/"
    return {n["id"]: {"@odata.id": base + n["id"], "Id": n["id"], "MACAddress": n["mac"],
                      "SpeedMbps": n["speed_mbps"], "Status": {"State": "Enabled"}}
            for n in s["nics"]}


def _chassis(sid: str, s: JSON) -> JSON:
    path = f"{CHASSIS}{sid}"
    switches = [{"@odata.id": f"/redfish/v1/Fabrics/NVLink/Switches/NVSwitch_{i}"}
                for i in range(int(s["nvswitch_count"]))]
    return {"@odata.id": path, "Id": f"lab-{sid}", "Name": "Chassis",
            "ChassisType": "RackMount", "Manufacturer": s["vendor"], "Model": s["model"],
            "SerialNumber": s["serial"], "Power": {"@odata.id": f"{path}/Power"},
            "Links": {"ComputerSystems": [{"@odata.id": f"{SYSTEMS}{sid}"}],
                      "Switches": switches}}


def _power(sid: str, s: JSON) -> JSON:
    psus = [{"MemberId": str(i), "Name": f"PSU{i}", "PowerCapacityWatts": s["psu_rating_w"],
             "Status": {"State": "Enabled", "Health": "OK"}} for i in range(s["psu_count"])]
    return {"@odata.id": f"{CHASSIS}{sid}/Power", "PowerSupplies": psus,
            "PowerControl": [{"MemberId": "0", "PowerConsumedWatts": s["power_w"]}]}


def served(sid: str, s: JSON, rest: str, chassis: bool) -> JSON | None:
    """The resource the layer serves itself at a system's (or its chassis') sub-path."""
    if chassis:
        return {"": _chassis(sid, s), "/Power": _power(sid, s)}.get(rest)
    for kind, members in (("Processors", _processors(sid, s)),
                          ("EthernetInterfaces", _interfaces(sid, s)),
                          ("BootOptions", _boot_options(sid, s))):
        base = f"{SYSTEMS}{sid}/{kind}"
        if rest == f"/{kind}":
            return _collection(base, kind, [m["@odata.id"] for m in members.values()])
        if rest.startswith(f"/{kind}/"):
            return members.get(rest[len(kind) + 2:])
    return None


# ---------------------------------------------------------------- the HTTP layer


class _Handler(BaseHTTPRequestHandler):
    upstream_port = 0
    systems: ClassVar[dict[str, JSON]] = {}
    # BootSourceOverrideEnabled as last set, per system: sushy-tools stores Target and Mode
    # but always reports Continuous (TEST-PEERS.md); a shaped system reports its vendor, not
    # "Sushy Emulator", so the driver's quirk for that does not apply, and the layer answers
    # as a conforming BMC does: Once when Once was set.
    override: ClassVar[dict[str, str]] = {}
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: sushy-tools logs every request already

    def _upstream(self, method: str, path: str, body: bytes | None
                  ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(HOST, self.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection", "content-length")}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding",
                                 "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        # One request per connection, said so, as sushy-tools' own server (werkzeug) does:
        # a client never reuses a connection this side may already have closed (a reused
        # one lost a power request to a reset now and then behind the latency proxy).
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _json(self, doc: JSON) -> None:
        self._send(200, [("Content-Type", "application/json")], json.dumps(doc).encode())

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        status, headers, data = self._upstream(self.command, self.path, body)
        self._send(status, headers, data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        m_sys, m_ch = _SYS_PATH.match(path), _CHASSIS_PATH.match(path)
        match = m_sys or m_ch
        sid = match.group(1) if match else ""
        s = self.systems.get(sid)
        if match is None or s is None:
            self._forward()
            return
        status, headers, data = self._upstream("GET", f"{SYSTEMS}{sid}", None)
        if status != 200:  # sushy-tools refused (auth) or does not know it: say the same
            self._send(status, headers, data)
            return
        rest = match.group(2) or ""
        if m_sys and not rest:
            doc = json.loads(data)
            doc.update(_system_extra(sid, s))
            if isinstance(doc.get("Boot"), dict):
                doc["Boot"].update(_boot_extra(sid))
            enabled = self.override.get(sid)
            if enabled is not None and isinstance(doc.get("Boot"), dict):
                doc["Boot"]["BootSourceOverrideEnabled"] = enabled
            doc.setdefault("Links", {})["Chassis"] = [{"@odata.id": f"{CHASSIS}{sid}"}]
            self._send(status, headers, json.dumps(doc).encode())
            return
        own = served(sid, s, rest, chassis=m_ch is not None)
        if own is None:
            self._forward()
        else:
            self._json(own)

    def do_PATCH(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        status, headers, data = self._upstream("PATCH", self.path, body)
        m_sys = _SYS_PATH.match(self.path.split("?")[0].rstrip("/"))
        if m_sys and not m_sys.group(2) and m_sys.group(1) in self.systems \
                and 200 <= status < 300 and body:
            try:
                boot = json.loads(body).get("Boot") or {}
            except (ValueError, AttributeError):
                boot = {}
            if isinstance(boot, dict) and boot.get("BootSourceOverrideEnabled"):
                self.override[m_sys.group(1)] = str(boot["BootSourceOverrideEnabled"])
        self._send(status, headers, data)

    do_POST = do_PUT = do_DELETE = _forward


def serve(config: JSON) -> list[ThreadingHTTPServer]:
    """Start one listener per [port, upstream]; returns the servers (already serving)."""
    servers = []
    for listen, upstream in config["listen"]:
        handler = type("Handler", (_Handler,), {"upstream_port": int(upstream),
                                                "systems": config["systems"],
                                                "override": {}})
        server = ThreadingHTTPServer((HOST, int(listen)), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


def main() -> None:
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    servers = serve(config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print("shape ready", flush=True)
    stop.wait()
    for s in servers:
        s.shutdown()


if __name__ == "__main__":
    main()
