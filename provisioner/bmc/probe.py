"""Is there a BMC at this address? Unauthenticated presence probes for discovery:

- Redfish: GET /redfish/v1/ (the service root needs no login, DSP0266 §13.3.1); an answer
  with RedfishVersion is a Redfish service. No credentials are sent by the probe.
- IPMI: the RMCP/ASF Presence Ping (DSP0136 §3.2.4.3, what `ipmiping` sends) and, for
  BMCs that ignore ASF (OpenIPMI's ipmi_sim does), IPMI 1.5 Get Channel Authentication
  Capabilities without a session (IPMI v2.0 §22.13; ipmitool's first packet). Any answer
  on UDP 623 means an IPMI BMC.
"""

from __future__ import annotations

import socket
import warnings
from dataclasses import dataclass
from typing import Any

import requests
import urllib3

# RMCP header (version 6, seq 0xff, class ASF) + ASF: IANA 4542, Presence Ping (0x80).
ASF_PRESENCE_PING = bytes.fromhex("0600ff06000011be80000000")
# RMCP (class IPMI) + IPMI 1.5 session header (no auth) + Get Channel Auth Capabilities.
IPMI_AUTH_CAP = bytes.fromhex("0600ff07000000000000000000092018c88100388e04b5")


@dataclass(frozen=True)
class RedfishRoot:
    version: str
    vendor: str | None
    product: str | None
    uuid: str | None


def redfish_root(address: str, port: int, scheme: str, timeout_s: float
                 ) -> RedfishRoot | None:
    """The Redfish service root at address:port, or None when nothing Redfish answers."""
    host = f"[{address}]" if ":" in address else address
    url = f"{scheme}://{host}:{port}/redfish/v1/"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        try:
            # verify=False: only the public service root is read, nothing is sent; a new
            # BMC's certificate is self-signed until it is enrolled. No proxy or .netrc from
            # the environment (trust_env), as for every BMC request (redfish_http).
            with requests.Session() as session:
                session.trust_env = False
                resp = session.get(url, timeout=timeout_s, verify=False,
                                   allow_redirects=False)
            body: Any = resp.json() if resp.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None
    if not isinstance(body, dict) or "RedfishVersion" not in body:
        return None
    return RedfishRoot(version=str(body["RedfishVersion"]), vendor=body.get("Vendor"),
                       product=body.get("Product"), uuid=body.get("UUID"))


def ipmi_presence(address: str, port: int = 623, timeout_s: float = 0.5) -> bool:
    """True when something answers an RMCP presence ping or an IPMI 1.5 capabilities
    request on address:port (UDP)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout_s)
        try:
            for packet in (ASF_PRESENCE_PING, IPMI_AUTH_CAP):
                s.sendto(packet, (address, port))
            data, _ = s.recvfrom(512)
        except OSError:
            return False
    return len(data) >= 4 and data[0] == 0x06  # an RMCP answer
