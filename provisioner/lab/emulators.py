"""The BMC emulators the lab runs: sushy-tools (Redfish) and OpenIPMI's ipmi_sim, each
configured and spawned here; lab/__init__.py records and stops them."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from provisioner.errors import ConfigError
from provisioner.lab import procs
from provisioner.lab.procs import LOOPBACK
from provisioner.secrets import write_private

# The lab's own Python dependencies: the optional extra `provisioner[lab]`, never installed
# on a production controller (pyproject.toml). Module -> what it is for.
LAB_MODULES = {"sushy_tools": "sushy-tools, the Redfish BMC emulator",
               "twisted.conch": "Twisted Conch, the SSH server in front of the switch stand-in"}


def require_lab_extra(find: Any = importlib.util.find_spec) -> None:
    """Refuse `lab up` at once, naming what is missing, when the [lab] extra is not there."""
    missing = []
    for module, what in LAB_MODULES.items():
        try:
            found = find(module) is not None
        except ModuleNotFoundError:  # the parent package (twisted) is missing too
            found = False
        if not found:
            missing.append(what)
    if missing:
        raise ConfigError("the lab needs " + " and ".join(missing) + ", which this "
                          "installation lacks", hint="pip install 'provisioner[lab]' (the "
                          "lab's own dependencies; a production controller needs none)")


def write_sushy_config(rdir: Path, conf: Path, password: str,
                       systems: list[dict[str, Any]], user: str) -> None:
    """sushy-tools' config: fake driver, these systems, HTTP basic auth (bcrypt htpasswd)."""
    import bcrypt  # sushy-tools' own dependency for its htpasswd file

    htpasswd = rdir / "htpasswd"
    write_private(htpasswd, f"{user}:"
                  + bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode() + "\n")
    conf.write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(rdir / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n")


def spawn_sushy(rdir: Path, conf: Path, port: int) -> subprocess.Popen[bytes]:
    log = rdir / "emulator.log"
    env = {**os.environ, "TMPDIR": str(rdir / "tmp")}  # virtual media downloads land here
    return procs.spawn([sys.executable, "-m", "sushy_tools.emulator.main", "--config",
                        str(conf), "-i", LOOPBACK, "-p", str(port)], log, env)


def spawn_ipmi_sim(d: Path, hostname: str, port: int, password: str, ctl: Path,
                   user: str) -> tuple[subprocess.Popen[bytes], Path]:
    """One OpenIPMI ipmi_sim on loopback in D: a LAN channel with this user, and a chassis
    control program that keeps power and boot state under D/chassis."""
    (d / "chassis").mkdir(parents=True)
    (d / "state").mkdir()
    guid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{hostname}.ipmi.lab").hex
    lan = d / "lan.conf"
    write_private(lan, f"""\
name "{hostname}"
set_working_mc 0x20
  startlan 1
    addr {LOOPBACK} {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid {guid}
  endlan
  chassis_control "{ctl} {d / 'chassis'}"
  user 2 true "{user}" "{password}" admin 10 none md2 md5 straight
""")
    emu = d / "bmc.emu"
    emu.write_text("mc_setbmc 0x20\n"
                   "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
                   "sel_enable 0x20 1000 0x0a\nmc_enable 0x20\n")
    ipmi_sim = shutil.which("ipmi_sim")
    if ipmi_sim is None:
        raise ConfigError("lab: ipmi_sim is not installed",
                          hint="apt-get install openipmi (scripts/bootstrap.sh does it)")
    log = d / "ipmi_sim.log"
    proc = procs.spawn([ipmi_sim, "-n", "-c", str(lan), "-f", str(emu), "-s",
                        str(d / "state")], log)
    return proc, log
