"""Run fake-switches devices in one Twisted reactor, bound to 127.0.0.1 only.

usage: python -m tests.integration.peers.fake_switch MODEL:PORT[:HOSTNAME] ...
Login admin/admin, enable secret `admin`. Our own launcher (not fake-switches' CLI) because
fake-switches 1.5.0's CLI stores the enable password as bytes on Python 3, so no enable
password but the empty one ever matches, and it binds to 0.0.0.0 by default.
Prints one "ready MODEL PORT" line per device once listening.
"""

from __future__ import annotations

import sys

from fake_switches import switch_factory
from fake_switches.transports.ssh_service import SwitchSshService
from twisted.internet import reactor


def main(specs: list[str]) -> None:
    factory = switch_factory.SwitchFactory()
    for spec in specs:
        model, port, *rest = spec.split(":")
        hostname = rest[0] if rest else f"sw{port}"
        core = factory.get(model, hostname, "admin")  # enable password as str
        SwitchSshService(ip="127.0.0.1", port=int(port), switch_core=core,
                         users={"admin": b"admin"}).hook_to_reactor(reactor)
        print(f"ready {model} {port}", flush=True)
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1:])
