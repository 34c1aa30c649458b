"""The kernel host's work for test_kernel_host.py, as a process of its own.

The test starts it and reads what it wrote; a process of its own, so that a stop of the
suite (SIGTERM) stops the guests too. It boots the guest (dgx01) and its peer (dgx02),
their RoCE and storage ports wired to each other, runs the playbook in check mode on the
guest (`provision run --check`), observes them, runs the playbook (the host network role on
both, the kernel-bound steps on the guest), observes them, runs RDMA between them over
soft-RoCE (rping, ib_write_bw) at the configured MTU, changes values by hand (a sysctl,
the RoCE ports' MTU, and runs RDMA again at 1500), runs the playbook again, observes
them again, runs the installer's disk guard, stops the guests, and writes result.json;
it judges nothing itself.

    python -m tests.integration.kernel_host_job OUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import yaml

from provisioner import boot, install, render, runner
from provisioner.inventory import load
from provisioner.lab import kernel_host
from provisioner.render import pxe
from provisioner.state import StateStore
from provisioner.switches import live
from provisioner.workflows.steps import intent

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "fixtures" / "kernel_host" / "kernel.yml"
# What a lab host cannot have: a GPU, a cluster, a ConnectX NIC; and the guest has no
# package source (restrict=on), so installs are skipped by their tag as in Molecule.
SKIP = ("needs_gpu", "needs_cluster", "needs_nic", "needs_mirror")
SYSCTL = yaml.safe_load((ROOT / "roles/base_os/defaults/main.yml").read_text())[
    "base_os_sysctl"]
DRIFT = "vm.max_map_count"  # base_os sets 1048576; the kernel's default is 65530
# Run in the guest: what the test checks, read in one ssh call (each costs seconds there).
OBSERVE = """
import json, os, subprocess
release = os.uname().release
initrd = f"/boot/initrd.img-{release}"
print(json.dumps({
    "modules": [line.split()[0] for line in open("/proc/modules")],
    "swaps": open("/proc/swaps").read().splitlines()[1:],
    "fstab": open("/etc/fstab").read(),
    "sysctl": {k: open("/proc/sys/" + k.replace(".", "/")).read().split()
               if os.path.exists("/proc/sys/" + k.replace(".", "/")) else None
               for k in KEYS},
    "files": {p: os.path.exists(p) for p in ("/etc/sysctl.d/90-provisioner.conf",
              "/etc/modules-load.d/provisioner.conf", "/etc/modprobe.d/blacklist-nouveau.conf")},
    "initrd_mtime": os.stat(initrd).st_mtime,
    "initrd_files": subprocess.run(["lsinitramfs", initrd], capture_output=True,
                                   text=True).stdout.splitlines(),
}))
"""


def _observe(host: kernel_host.KernelHost) -> dict[str, Any]:
    script = OBSERVE.replace("KEYS", json.dumps(sorted(SYSCTL)))
    proc = subprocess.run(host.ssh_argv("python3 -", stdin=True), input=script, capture_output=True,
                          text=True, timeout=300, check=True)
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _project(hosts: dict[kernel_host.KernelHost, list[dict[str, Any]]], pdd: Path) -> None:
    """Both guests, each with the host network plan the renderer made for its node."""
    (pdd / "project").mkdir(parents=True)
    shutil.copy(PLAYBOOK, pdd / "project" / "kernel.yml")
    (pdd / "inventory").mkdir()
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        host.name: {"ansible_host": "127.0.0.1", "ansible_port": host.port,
                    "ansible_user": "root", "ansible_ssh_private_key_file": str(host.key),
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                               "-o UserKnownHostsFile=/dev/null",
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "host_network_interfaces": plan}
        for host, plan in hosts.items()}}}))


# Set by SIGTERM (the suite ending early): a playbook run is cancelled (ansible-runner ends
# its ansible-playbook), anything else stops at once; the guest is stopped either way.
STOP = threading.Event()
RUNNING = threading.Event()


def _on_term(*_: Any) -> None:
    STOP.set()
    if not RUNNING.is_set():
        raise SystemExit(143)


def _run(pdd: Path, *, check: bool = False, limit: str | None = None) -> dict[str, Any]:
    RUNNING.set()
    # pipelining and force_handlers as the rendered project's ansible.cfg has them; a cancel
    # callback of ours, or ansible-runner would take SIGTERM for itself
    try:
        result = runner.run_playbook(
            pdd, "kernel.yml", skip_tags=",".join(SKIP), forks=2, cancel=STOP.is_set, check=check,
            limit=limit,
            envvars={"ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_PIPELINING": "True",
                     "ANSIBLE_FORCE_HANDLERS": "True"})
    finally:
        RUNNING.clear()
    if STOP.is_set():
        raise SystemExit(143)
    return {"ok": result.ok, "failures": [e.describe() for e in result.failures],
            "events": [[e.role, e.task, e.status] for e in result.events
                       if e.host == KERNEL_HOST],
            "peer_events": [[e.role, e.task, e.status] for e in result.events
                            if e.host == PEER_HOST]}


NODE = "dgx01"  # the example site's node whose boot the guest plays
PEER = "dgx02"  # the node its peer guest plays: its RoCE and storage ports wired to dgx01's
KERNEL_HOST, PEER_HOST = "kernelhost", "peer"
# Both guests boot at once, each from a thread of this pool, which lives as long as the job:
# a guest's QEMU ends with the thread that started it (PR_SET_PDEATHSIG follows the thread,
# prctl(2)), so a pool shut down after the boots would end both guests.
BOOTERS = ThreadPoolExecutor(2)
NET_OBSERVE = "ip -j addr show; ip -j rule show; ip -j route show table all"


Edit = tuple[str, str, str]  # (file of the site, text there, what replaces it)

# A second RoCE rail, as a DGX's compute ports are: its own network and subnet, an address
# and a port (MAC) on each guest; with two rails each gets a routing table and a rule.
RAILS: tuple[Edit, ...] = (
    ("site.yaml", "  - {name: roce, kind: roce, cidr: 10.250.2.0/24, mtu: 9000, vlan: 100}\n",
     "  - {name: roce, kind: roce, cidr: 10.250.2.0/24, mtu: 9000, vlan: 100}\n"
     "  - {name: rail2, kind: roce, cidr: 10.251.2.0/24, mtu: 9000}\n"),
    ("site.yaml", '    - {rule: rack_leaf, nic: roce, port_pattern: "swp{n}s0"}\n',
     '    - {rule: rack_leaf, nic: roce, port_pattern: "swp{n}s0"}\n'
     '    - {rule: rack_leaf, nic: rail2, port_pattern: "swp{n}s1"}\n'),
    *(("placements.yaml", f"roce: 10.250.2.{n}, storage",
       f"roce: 10.250.2.{n}, rail2: 10.251.2.{n}, storage") for n in (21, 22)),
    *(("placements.yaml", f'roce: "52:54:00:00:01:{n}", storage',
       f'roce: "52:54:00:00:01:{n}", rail2: "52:54:00:00:03:{n}", storage')
      for n in (21, 22)))
# then the storage network's MTU, 9000 to 4000, and its VLAN tagged at the hosts
STORAGE_EDIT: Edit = (
    "site.yaml", "{name: storage, kind: storage, cidr: 10.250.3.0/24, mtu: 9000, vlan: 200}",
    "{name: storage, kind: storage, cidr: 10.250.3.0/24, mtu: 4000, vlan: 200, "
    "host_tagged: true}")


def _plans(out: Path, edits: Sequence[Edit]) -> dict[str, list[dict[str, Any]]]:
    """The host network plan of NODE and PEER, as `provision render` writes it for a copy
    of the example with these edits."""
    site = shutil.copytree(ROOT / "inventories" / "example", out / "site",
                           ignore=shutil.ignore_patterns(".provision"))
    for name, old, new in edits:
        text = (site / name).read_text()
        assert old in text, (name, old)
        (site / name).write_text(text.replace(old, new, 1))
    rendered = render.render(load(site), out / "render").out
    return {n: yaml.safe_load((rendered / "inventory/host_vars" / f"{n}.yml").read_text())[
        "host_network_interfaces"] for n in (NODE, PEER)}


def _net(host: kernel_host.KernelHost) -> list[Any]:
    """`ip -j` addresses, rules and routes (every table) inside the guest."""
    proc = _ssh(host, NET_OBSERVE)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _live_read(host: kernel_host.KernelHost, nic: str) -> tuple[str, int]:
    """`fabric check --live`'s own host script (switches/live.py), run in the guest."""
    proc = _ssh(host, live.host_script(nic), check=False)
    return proc.stdout, proc.returncode


def _ssh(host: kernel_host.KernelHost, command: str, *, check: bool = True,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(host.ssh_argv(command), capture_output=True, text=True,
                          timeout=timeout, check=check)


# Read in the guest: the soft-RoCE device's GIDs with their types, its port's active MTU
RDMA_OBSERVE = r"""
import glob, json, os, re, subprocess
port = "/sys/class/infiniband/rxe0/ports/1"
gids = []
for path in sorted(glob.glob(port + "/gids/*"), key=lambda p: int(os.path.basename(p))):
    i = os.path.basename(path)
    gid = open(path).read().strip()
    try:
        kind = open(f"{port}/gid_attrs/types/{i}").read().strip()
    except OSError:
        kind = ""
    if gid.strip("0:"):
        gids.append([int(i), gid, kind])
info = subprocess.run(["ibv_devinfo", "-d", "rxe0"], capture_output=True, text=True).stdout
mtu = re.search(r"active_mtu:\s*(\d+)", info)
print(json.dumps({"gids": gids, "active_mtu": int(mtu.group(1)) if mtu else None,
                  "ibv_devinfo": info}))
"""


def _rdma_state(host: kernel_host.KernelHost) -> dict[str, Any]:
    proc = subprocess.run(host.ssh_argv("python3 -", stdin=True), input=RDMA_OBSERVE,
                          capture_output=True, text=True, timeout=120, check=True)
    state: dict[str, Any] = json.loads(proc.stdout)
    return state


def _soft_roce(host: kernel_host.KernelHost, netdev: str) -> str:
    """The RDMA device a ConnectX port would bring, made by the kernel's rdma_rxe over
    the port the host network role configured: the lab's hardware, not the payload's."""
    return _ssh(host, f"modprobe rdma_rxe && (rdma link show rxe0/1 >/dev/null 2>&1 || "
                f"rdma link add rxe0 type rxe netdev {shlex.quote(netdev)}) && "
                "rdma link show").stdout


def _until(host: kernel_host.KernelHost, command: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _ssh(host, command, check=False).returncode == 0:
            return True
        time.sleep(1)
    return False


def _rping(server: kernel_host.KernelHost, client: kernel_host.KernelHost,
           address: str) -> dict[str, Any]:
    """rping over RDMA-CM: the server waits, the client sends three pings (retried while
    the server's listener is not up yet)."""
    _ssh(server, f"nohup timeout 120 rping -s -a {address} -C 3 -v >/tmp/rping.log 2>&1 &")
    for _ in range(10):
        proc = _ssh(client, f"timeout 60 rping -c -a {address} -C 3 -v", check=False)
        if proc.returncode == 0:
            break
        time.sleep(2)
    _until(server, "! pgrep -x rping >/dev/null", 60)
    return {"rc": proc.returncode, "client": proc.stdout + proc.stderr,
            "server": _ssh(server, "cat /tmp/rping.log").stdout}


BW = "ib_write_bw -R -d rxe0 -F -s 65536 -n 200"  # RDMA-CM, 200 writes of 64 KiB


def _write_bw(server: kernel_host.KernelHost, client: kernel_host.KernelHost,
              address: str) -> dict[str, Any]:
    """perftest's ib_write_bw between the guests over RDMA-CM; both sides' reports."""
    _ssh(server, "rm -f /tmp/bw.log")
    # line-buffered: perftest's "Waiting for client" would sit in stdio's buffer until exit
    _ssh(server, f"nohup timeout 240 stdbuf -oL -eL {BW} >/tmp/bw.log 2>&1 &")
    _until(server, "grep -q 'Waiting for client' /tmp/bw.log", 60)
    proc = _ssh(client, f"timeout 240 {BW} {address}", check=False, timeout=300)
    _until(server, "! pgrep -x ib_write_bw >/dev/null", 120)
    return {"rc": proc.returncode, "client": proc.stdout + proc.stderr,
            "server": _ssh(server, "cat /tmp/bw.log").stdout}


def _rdma_path(a: kernel_host.KernelHost, b: kernel_host.KernelHost,
               address: str, *, rping: bool = True) -> dict[str, Any]:
    return {"a": _rdma_state(a), "b": _rdma_state(b),
            **({"rping": _rping(a, b, address)} if rping else {}),
            "bw": _write_bw(a, b, address)}


def _data_disk(out: Path) -> Path:
    """A disk holding an installed system: ext4 with the install marker on it."""
    tree = out / "data-tree"
    (tree / "etc").mkdir(parents=True)
    (tree / install.MARKER.lstrip("/")).write_text(f"{NODE} boot=earlier\n")
    disk = out / "data.img"
    subprocess.run(["mke2fs", "-q", "-t", "ext4", "-F", "-d", str(tree), str(disk), "64M"],
                   check=True, timeout=60)
    return disk


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _boot_server(out: Path) -> tuple[boot.BootServer, StateStore]:
    """The example site's boot files (`pxe render`) served by the tool's boot server on
    127.0.0.1 (NODE's address, as far as it knows), over a state store of its own."""
    site = ROOT / "inventories" / "example"
    pxe.render_pxe(load(site), out / "pxe", server=IPv4Address("10.250.0.1"))
    store = StateStore(out / "state.db")
    store.enroll([NODE])
    srv = boot.serve(out / "pxe", IPv4Address("127.0.0.1"), 0, dhcp=False,
                     owners={NODE: "127.0.0.1"}, fill=lambda h: intent.served(store, h),
                     on_report=lambda h, text: intent.record_report(store, h, text))
    return srv, store


def _guard_run(host: kernel_host.KernelHost, srv: boot.BootServer, store: StateStore,
               *, reinstall: bool) -> dict[str, Any]:
    """A boot intent as `up` writes it, NODE's user-data fetched from the boot server as
    NODE fetches it, and its disk guard run in the guest as the installer runs it (sh -c),
    reporting to the same boot server (the guest reaches it at GUEST_FORWARD, not 10.250.0.1)."""
    run_id = store.start_run("up", backup=False)
    token = install.new_token()
    intent.record(store, NODE, run_id=run_id, token=token, reinstall=reinstall)
    with urllib.request.urlopen(f"{srv.url}/autoinstall/{NODE}/user-data", timeout=10) as r:
        doc = yaml.safe_load(r.read().decode())["autoinstall"]
    guard = doc["early-commands"][0].replace(
        "http://10.250.0.1:8080/", f"http://{kernel_host.GUEST_FORWARD}:8080/")
    reports = len(store.events(NODE, install.REPORTED))
    proc = subprocess.run(host.ssh_argv("sh -c " + shlex.quote(guard)), capture_output=True,
                          text=True, timeout=300, check=False)
    store.end_run(run_id, "ok")
    return {"token": token, "rc": proc.returncode, "stdout": proc.stdout,
            "stderr": proc.stderr, "late": doc["late-commands"],
            "reports": [e.detail for e in store.events(NODE, install.REPORTED)][reports:]}


def main(argv: list[str]) -> int:
    out = Path(argv[1])
    signal.signal(signal.SIGTERM, _on_term)
    found: dict[str, Any] = {"seconds": {}}
    clock = time.monotonic()

    def lap(name: str) -> None:  # where the job's time went, for the README's figures
        nonlocal clock
        found["seconds"][name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    try:
        key = out / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, timeout=30)
        kernel_host.ensure_kernel_root()
        lap("root")
        data = _data_disk(out)
        found["data_sha256"] = [_sha256(data)]
        srv, store = _boot_server(out)
        plans = _plans(out / "planned", RAILS)
        found["plans"] = plans
        nics_a, nics_b = kernel_host.wired_pair([i["mac"] for i in plans[NODE]],
                                                [i["mac"] for i in plans[PEER]])
        boots = [BOOTERS.submit(kernel_host.start, out / "guest", key, name=KERNEL_HOST,
                                data_disks=[data], nics=nics_a,
                                forwards=[(8080, srv.http.server_address[1])]),
                 BOOTERS.submit(kernel_host.start, out / "peer", key, name=PEER_HOST,
                                nics=nics_b)]
        errors = [f.exception() for f in boots]
        guests = [f.result() for f, e in zip(boots, errors, strict=True) if e is None]
        if len(guests) < 2:  # one did not come up: the other is stopped, the error raised
            for g in guests:
                kernel_host.stop(g)
            raise next(e for e in errors if e is not None)
        host, peer = guests
        lap("boot")
        found["accel"] = [host.accel, host.accel_note]
        print(f"kernel host booted under {host.accel_note}", flush=True)
        try:
            _project({host: plans[NODE], peer: plans[PEER]}, out / "run")
            # a check run first: what it changes shows in "before" (a fresh guest's state is
            # known: no module of ours loaded, swap on, the kernel's own sysctl values); on
            # the kernel host only, whose events the test reads (the emulated CPUs are the
            # suite's scarcest resource)
            found["check"] = _run(out / "run", check=True, limit=KERNEL_HOST)
            lap("check_run")
            found["before"] = _observe(host)
            lap("observe")
            found["net_before"] = {NODE: _net(host), PEER: _net(peer)}
            found["first"] = _run(out / "run")
            lap("first_run")
            found["after"] = _observe(host)
            found["net_after"] = {NODE: _net(host), PEER: _net(peer)}
            # the RDMA path over the RoCE ports the role configured (MTU 9000)
            roce = {n: next(i for i in plans[n] if i["kind"] == "roce") for n in (NODE, PEER)}
            address = roce[NODE]["address"].split("/")[0]
            found["rxe"] = [_soft_roce(host, roce[NODE]["name"]),
                            _soft_roce(peer, roce[PEER]["name"])]
            found["rdma"] = _rdma_path(host, peer, address)
            # what `fabric check --live` reads from a host, read from this one
            found["live"] = _live_read(host, roce[NODE]["name"])
            lap("rdma")
            # values changed by hand since: the second run must put back those, and only
            # those; meanwhile the RDMA path at the RoCE ports' MTU left at 1500
            subprocess.run(host.ssh_argv(f"sysctl -w {DRIFT}=65530"), capture_output=True,
                           timeout=120, check=True)
            for g, n in ((host, NODE), (peer, PEER)):
                _ssh(g, f"ip link set dev {shlex.quote(roce[n]['name'])} mtu 1500")
            found["rdma_1500"] = _rdma_path(host, peer, address, rping=False)
            found["live_1500"] = _live_read(host, roce[NODE]["name"])
            lap("rdma_1500")
            # and a change in the inventory: the storage network's MTU and tagging
            found["plans_second"] = _plans(out / "edited", (*RAILS, STORAGE_EDIT))
            _project({host: found["plans_second"][NODE], peer: found["plans_second"][PEER]},
                     out / "run2")
            found["second"] = _run(out / "run2")
            lap("second_run")
            found["after_second"] = _observe(host)
            found["net_after_second"] = {NODE: _net(host), PEER: _net(peer)}
            found["rdma_after_second"] = {"a": _rdma_state(host), "b": _rdma_state(peer)}
            # the installer's disk guard, on a node not named, then named with --reinstall
            found["guard_refuses"] = _guard_run(host, srv, store, reinstall=False)
            found["guard_granted"] = _guard_run(host, srv, store, reinstall=True)
            lap("guard")
        finally:
            kernel_host.stop(host)
            kernel_host.stop(peer)
            srv.stop()
        found["data_sha256"].append(_sha256(data))
    except BaseException:  # the test reports it, whatever ended the job
        found["error"] = traceback.format_exc()
    finally:
        (out / "result.json").write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
