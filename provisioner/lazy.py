"""Late imports of protocol libraries, one thread at a time.

A library that only some commands need (sushy, pyghmi, paramiko, netmiko) is imported where
it is used, and that first use is often many worker threads of one fan-out at once. Two
threads importing modules that share dependencies can meet Python's import deadlock
detection and see a module half-initialised ("cannot import name 'RedfishDriver'", seen in
an `up` run). Every late import goes through one lock, so each happens once, whole."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

_LOCK = threading.RLock()  # re-entrant: a late import may itself import late


def module(name: str) -> ModuleType:
    """`name`, imported on first use under the one lock (then sys.modules answers)."""
    with _LOCK:
        return importlib.import_module(name)
