"""The kernel host's work for test_kernel_host.py, as a process of its own.

The test starts it and reads what it wrote; a process of its own, so that a stop of the
suite (SIGTERM) stops the guest too. It boots the guest, runs the playbook in check mode
(`provision run --check`), observes it, runs the playbook, observes it, changes a value by
hand, runs the playbook again, observes it again, stops the guest, and writes result.json;
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
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import yaml

from provisioner import boot, install, runner
from provisioner.inventory import load
from provisioner.lab import kernel_host
from provisioner.render import pxe
from provisioner.state import StateStore
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


def _project(host: kernel_host.KernelHost, pdd: Path) -> None:
    (pdd / "project").mkdir(parents=True)
    shutil.copy(PLAYBOOK, pdd / "project" / "kernel.yml")
    (pdd / "inventory").mkdir()
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        host.name: {"ansible_host": "127.0.0.1", "ansible_port": host.port,
                    "ansible_user": "root", "ansible_ssh_private_key_file": str(host.key),
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                               "-o UserKnownHostsFile=/dev/null",
                    "ansible_python_interpreter": "/usr/bin/python3"}}}}))


# Set by SIGTERM (the suite ending early): a playbook run is cancelled (ansible-runner ends
# its ansible-playbook), anything else stops at once; the guest is stopped either way.
STOP = threading.Event()
RUNNING = threading.Event()


def _on_term(*_: Any) -> None:
    STOP.set()
    if not RUNNING.is_set():
        raise SystemExit(143)


def _run(pdd: Path, *, check: bool = False) -> dict[str, Any]:
    RUNNING.set()
    # pipelining and force_handlers as the rendered project's ansible.cfg has them; a cancel
    # callback of ours, or ansible-runner would take SIGTERM for itself
    try:
        result = runner.run_playbook(
            pdd, "kernel.yml", skip_tags=",".join(SKIP), forks=1, cancel=STOP.is_set, check=check,
            envvars={"ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_PIPELINING": "True",
                     "ANSIBLE_FORCE_HANDLERS": "True"})
    finally:
        RUNNING.clear()
    if STOP.is_set():
        raise SystemExit(143)
    return {"ok": result.ok, "failures": [e.describe() for e in result.failures],
            "events": [[e.role, e.task, e.status] for e in result.events]}


NODE = "dgx01"  # the example site's node whose boot the guest plays


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
        host = kernel_host.start(out / "guest", key, data_disks=[data],
                                 forwards=[(8080, srv.http.server_address[1])])
        lap("boot")
        found["accel"] = [host.accel, host.accel_note]
        print(f"kernel host booted under {host.accel_note}", flush=True)
        try:
            _project(host, out / "run")
            # a check run first: what it changes shows in "before" (a fresh guest's state is
            # known: no module of ours loaded, swap on, the kernel's own sysctl values)
            found["check"] = _run(out / "run", check=True)
            lap("check_run")
            found["before"] = _observe(host)
            lap("observe")
            found["first"] = _run(out / "run")
            lap("first_run")
            found["after"] = _observe(host)
            # a value changed by hand since: the second run must put back that, and only that
            subprocess.run(host.ssh_argv(f"sysctl -w {DRIFT}=65530"), capture_output=True,
                           timeout=120, check=True)
            found["second"] = _run(out / "run")
            lap("second_run")
            found["after_second"] = _observe(host)
            # the installer's disk guard, on a node not named, then named with --reinstall
            found["guard_refuses"] = _guard_run(host, srv, store, reinstall=False)
            found["guard_granted"] = _guard_run(host, srv, store, reinstall=True)
            lap("guard")
        finally:
            kernel_host.stop(host)
            srv.stop()
        found["data_sha256"].append(_sha256(data))
    except BaseException:  # the test reports it, whatever ended the job
        found["error"] = traceback.format_exc()
    finally:
        (out / "result.json").write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
