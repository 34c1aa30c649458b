"""`fabric check --live`, the gathering: each switch's running config over its driver (the
same netmiko edge as diff/push), each host's `mlnx_qos -i <nic>` over SSH with the site's
login (workflows/steps/guard.py: same key, same host-key policy), then fabric/live.py.

Read-only: nothing is sent to a switch but its `show` command. Switches and hosts are read
on the engine's fan-out; one that cannot be read is reported, the others go on.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

import paramiko  # type: ignore[import-untyped]  # no stubs; a netmiko dependency

from provisioner import fabric, roce
from provisioner.credentials import CredentialResolver
from provisioner.errors import ProvisionerError
from provisioner.fabric.base import Mismatch, SwitchQos
from provisioner.fabric.live import HostQos, Unverifiable, compare_live, parse_mlnx_qos
from provisioner.fanout import fan_out
from provisioner.inventory.cabling import endpoints, resolve
from provisioner.inventory.loader import LoadedSite
from provisioner.profile import Profile
from provisioner.render import ansible_host
from provisioner.ssh import Login, connect, login_for
from provisioner.switches import ops, staged, standins

QOS_OSES = ("cumulus", "onyx", "sonic", "eos")  # the ones whose config carries RoCE QoS


@dataclass(frozen=True, slots=True)
class LiveReport:
    links_checked: int
    mismatches: tuple[Mismatch, ...]
    unverifiable: tuple[Unverifiable, ...]
    notes: tuple[str, ...] = ()  # the lab: what a stand-in switch could not show

    @property
    def ok(self) -> bool:
        return not self.mismatches


def run(loaded: LoadedSite, env: Mapping[str, str], prof: Profile,
        connect: ops.DriverFactory = ops.netmiko_factory, timeout_s: float = 20.0
        ) -> LiveReport:
    ops.refuse_inventory_errors(loaded)
    links = list(resolve(loaded.site, loaded.catalog))
    specs = {s.hostname: s for s in fabric.switch_specs(loaded)}
    switches = sorted({lk.switch for lk in links if lk.switch in specs})
    logins = CredentialResolver(loaded, env)

    def read_switch(name: str) -> SwitchQos | str:
        nos = specs[name].nos
        stand_in = loaded.lab_switches.get(name)
        if stand_in:
            return (f"lab stand-in speaking {stand_in} for a {nos} switch: it carries no "
                    "RoCE QoS")
        if nos not in QOS_OSES:
            return f"{nos} configs carry no RoCE QoS"
        try:
            drv = connect(ops.endpoint(loaded, name, logins, timeout_s))
        except ProvisionerError as exc:
            return str(exc)
        try:
            if isinstance(drv, staged.Shell):
                rc, text = drv.run(staged.FLAVORS[nos].show)
                if rc != 0:
                    return f"`{staged.FLAVORS[nos].show}` failed"
            else:
                text = drv.running_config()
            return fabric.RENDERERS[nos].parse(text)
        except (ProvisionerError, ValueError) as exc:
            return f"cannot read its config: {exc}"
        finally:
            drv.close()

    login = login_for(loaded, prof)
    eps = endpoints(loaded.site, loaded.catalog)

    def read_host(key: str) -> HostQos | str:
        host, nic = key.split(" ", 1)
        address = ansible_host(eps[host].node) if host in eps else None
        if address is None:
            return "no management address"
        return _mlnx_qos(address, login, nic, timeout_s)

    host_keys = sorted({f"{lk.node} {lk.nic}" for lk in links if lk.switch in specs})
    sw = {d.key: d.value if d.value is not None else f"no answer ({d.error or 'timeout'})"
          for d in fan_out(switches, read_switch, concurrency=8, deadline_s=timeout_s * 4)}
    hq = {d.key: d.value if d.value is not None else f"no answer ({d.error or 'timeout'})"
          for d in fan_out(host_keys, read_host, concurrency=8, deadline_s=timeout_s * 4)}
    policy = roce.policy(loaded.site.software.roce)
    found: list[Mismatch] = []
    unknown = [Unverifiable("switch", k, v) for k, v in sw.items() if isinstance(v, str)]
    unknown += [Unverifiable("host", k, v) for k, v in hq.items() if isinstance(v, str)]
    count = 0
    for lk in links:
        s, h = sw.get(lk.switch), hq.get(f"{lk.node} {lk.nic}")
        if isinstance(s, SwitchQos) and isinstance(h, HostQos):
            count += 1
            found += compare_live(policy, lk.node, lk.nic, lk.host_mtu_bytes, h, lk.switch,
                                  lk.switch_port, s)
    return LiveReport(count, tuple(found), tuple(unknown),
                      tuple(standins.notes(loaded, switches, lab=prof.lab, live=True)))


def _mlnx_qos(address: str, login: Login, nic: str, timeout_s: float) -> HostQos | str:
    client = paramiko.SSHClient()
    try:
        connect(client, address, login, timeout_s)  # the site's known_hosts, as the guard
        cmd = (f"command -v mlnx_qos >/dev/null || exit 127; "
               f"mlnx_qos -i {shlex.quote(nic)}")
        _, stdout, _ = client.exec_command(cmd, timeout=timeout_s)
        text = stdout.read(65536).decode(errors="replace")
        code = stdout.channel.recv_exit_status()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return f"cannot log in on {address} ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        client.close()
    if code == 127:
        return "mlnx_qos is not installed (no MLNX_OFED/DOCA tools): not verifiable"
    if code != 0:
        return f"`mlnx_qos -i {nic}` failed (exit {code})"
    try:
        return parse_mlnx_qos(text)
    except ValueError as exc:
        return str(exc)
