"""Late imports under one lock: many threads asking at once get one whole import.

The failure this guards against (an `up` run in CI: "cannot import name 'RedfishDriver'"
for one node of a fan-out) needs Python's import deadlock detection between threads and
did not reproduce in isolation; the lab's test_up faults run is where it showed."""

from __future__ import annotations

import subprocess
import sys

RACE = r"""
import sys, threading
sys.argv = ["x"]
from provisioner import bmc
from provisioner.secrets import Secret
errors = []
start = threading.Barrier(32)
def go(i):
    start.wait()
    target = bmc.BmcTarget(node=f"n{i}", protocol="redfish" if i % 2 else "ipmi",
                           address="127.0.0.1", port=1, username="u",
                           password=Secret("p"), request_timeout_s=1.0)
    try:
        bmc.make_driver(target)
    except ImportError as e:
        errors.append(repr(e))
    except Exception:
        pass  # a driver may refuse this made-up target; the import is what is tested
threads = [threading.Thread(target=go, args=(i,)) for i in range(32)]
for t in threads: t.start()
for t in threads: t.join()
print("errors", len(errors), errors[:1])
"""


def test_drivers_made_by_many_threads_at_once_import_whole():
    for _ in range(3):  # each a fresh interpreter: the first import is the one at risk
        out = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True,
                             check=True, timeout=120).stdout
        assert "errors 0" in out, out
