"""The lab's Python wheelhouse: how an air-gapped site gets ansible-core and ansible-runner
onto its execution nodes, built for the lab hosts.

Debian's own ansible-core and ansible-runner are not the controller's versions (`provision
doctor` would refuse them), so, as a site does: `pip download` on the controller fetches
the controller's exact ansible-core, ansible-runner and pip, with their dependencies at the
controller's versions too (a constraints file of its environment), as wheels for the lab
hosts' Python and machine. Built once, cached under ~/.cache/provisioner/wheelhouse/<key>;
each lab links it into its mirror's root (`wheels/`, beside the apt repository) and the
mirror's HTTP server serves it. Each execution node then installs from there alone:

    python3 -m venv --without-pip VENV            # the rootfs has python3, not pip
    VENV/bin/python pip-X.whl/pip install --no-index --find-links URL/wheels/ \\
        --require-hashes -r REQUIREMENTS     # ansible-core==A, ansible-runner==B, pip==X, ...

Running pip from its own wheel is what pip supports for bootstrapping (pip's
src/pip/__main__.py: "This allows the usage python pip-*.whl/pip install pip-*.whl").
The mirror is plain HTTP (pip needs `--trusted-host` for it), so the node installs in
pip's hash-checking mode: a requirements file of every wheel with the sha256 the
controller computed (`--require-hashes`). pip's installation report (`--report`) stays in
the venv: the URL and sha256 of every wheel installed, which the lab test compares with
the wheelhouse.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path
from urllib.parse import urlsplit

from provisioner.errors import ConfigError

PACKAGES = ("ansible-core", "ansible-runner", "pip")
VENV = "/opt/provisioner/venv"  # on each lab execution node (README's example path)
REPORT = VENV + "/provisioner-install.json"  # pip's installation report
MIRROR_DIR = "wheels"  # in the lab mirror's root, served beside dists/ and pool/
# manylinux tags a Debian bookworm host (glibc 2.36) accepts, newest first; pure-Python
# wheels (none-any) are always accepted (PEP 600, packaging.python.org "Platform
# compatibility tags").
MANYLINUX = ("manylinux_2_36", "manylinux_2_34", "manylinux_2_28", "manylinux_2_17",
             "manylinux2014")
VERSION = "1"  # bump when how the wheelhouse is built changes: a new cache directory


@dataclass(frozen=True)
class Wheelhouse:
    """A built wheelhouse: its directory and the pins its wheels satisfy."""

    root: Path
    pins: dict[str, str]

    def wheel(self, name: str) -> Path:
        """The wheel of one pinned package (pip's own, to bootstrap with)."""
        stem = re.sub(r"[-_.]+", "_", name).lower()
        for p in self.root.glob("*.whl"):
            if p.name.lower().startswith(f"{stem}-{self.pins[name]}-"):
                return p
        raise ConfigError(f"lab wheelhouse {self.root}: no wheel of {name} {self.pins[name]}")


def pins() -> dict[str, str]:
    """The controller's versions of what an execution node needs (doctor compares them)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            raise ConfigError(f"lab wheelhouse: {name} is not installed on the controller "
                              f"({sys.prefix})") from None
    return out


def constraints() -> list[str]:
    """name==version of every distribution in the controller's environment, so the node's
    dependencies (jinja2, PyYAML, cryptography, ...) are the controller's too."""
    found = {}
    for d in distributions():
        name = d.metadata["Name"]
        if name and d.version:
            found[name.lower()] = f"{name}=={d.version}"
    return sorted(found.values())


def python_of(rootfs: Path) -> str:
    """major.minor of the lab hosts' python3 (the rootfs's /usr/bin/python3 link)."""
    link = rootfs / "usr/bin/python3"
    target = os.readlink(link) if link.is_symlink() else ""
    m = re.fullmatch(r"(?:.*/)?python(\d+\.\d+)", target)
    if m is None:
        raise ConfigError(f"lab wheelhouse: cannot tell the lab hosts' Python from {link}")
    return m.group(1)


def download_argv(dest: Path, py: str, pinned: dict[str, str], constraints_file: Path
                  ) -> list[str]:
    """`pip download` on the controller for the lab hosts' Python and machine: wheels only
    (the node has no compiler), the controller's own pip configuration (index, proxy)."""
    abi = "cp" + py.replace(".", "")
    machine = platform.machine()
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
            "--progress-bar", "off", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", py, "--implementation", "cp", "--abi", abi, "--abi", "abi3",
            "--abi", "none", "--constraint", str(constraints_file)]
    for tag in MANYLINUX:
        argv += ["--platform", f"{tag}_{machine}"]
    return argv + [f"{n}=={v}" for n, v in sorted(pinned.items())]


def ensure(rootfs: Path, cache: Path) -> Wheelhouse:
    """The wheelhouse for the controller's versions and the lab hosts' Python, downloaded
    on first use (about 11 MB) and cached; a failed download is a clear error."""
    pinned = pins()
    py = python_of(rootfs)
    cons = constraints()
    key = hashlib.sha256(json.dumps([VERSION, sorted(pinned.items()), py, platform.machine(),
                                     MANYLINUX, cons]).encode()).hexdigest()[:16]
    root = cache / "wheelhouse" / key
    if (root / ".complete").exists():
        return Wheelhouse(root, pinned)
    tmp = root.with_name(f"{key}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # the pinned packages are pinned on the command line, not twice
    (tmp / "constraints.txt").write_text("".join(
        c + "\n" for c in cons if c.split("==")[0].lower() not in PACKAGES))
    argv = download_argv(tmp, py, pinned, tmp / "constraints.txt")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        # which index it asked, and pip's errors (not its notes on ignored find-links)
        why = [ln for ln in proc.stdout.splitlines() if ln.startswith("Looking in")] + [
            ln for ln in proc.stderr.splitlines() if not ln.startswith("WARNING: Location")]
        raise ConfigError(
            "lab wheelhouse: `pip download` of "
            + " ".join(f"{n}=={v}" for n, v in sorted(pinned.items()))
            + f" for the lab hosts' Python {py} failed (exit {proc.returncode}): "
            + " ".join(" ".join(why).split())[-500:],
            hint="the controller needs a package index once (PyPI, or the site's own: "
                 f"PIP_INDEX_URL); the wheelhouse is then cached in {root.parent}")
    (tmp / ".complete").write_text(json.dumps(pinned) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return Wheelhouse(root, pinned)


def publish(house_root: Path, mirror_root: Path) -> Path:
    """Link the wheelhouse into the lab mirror's root (served as `wheels/`)."""
    out = mirror_root / MIRROR_DIR
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for p in sorted(house_root.glob("*.whl")):
        try:
            os.link(p, out / p.name)
        except OSError:
            shutil.copy2(p, out / p.name)
    return out


def requirements(house_root: Path) -> list[str]:
    """`name==version --hash=sha256:...` for every wheel. In pip's hash-checking mode
    (--require-hashes) nothing is installed whose bytes differ from what the controller
    downloaded, whatever the transport: the lab mirror is plain HTTP, like its apt
    repository, whose trust comes from its signature."""
    out = []
    for p in sorted(house_root.glob("*.whl")):
        name, ver = p.name.split("-")[:2]  # wheel names: {name}-{version}-...: PEP 427
        out.append(f"{name}=={ver} --hash=sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}")
    return out


def install_script(house: Wheelhouse, mirror_url: str) -> str:
    """What a node runs (over SSH) to install the wheelhouse from the lab mirror alone:
    pip isolated from any environment or configuration, every wheel checked against the
    sha256 the controller computed (pip's own wheel too, before it runs)."""
    wheels = mirror_url.rstrip("/") + f"/{MIRROR_DIR}/"
    pip_whl = house.wheel("pip")
    fetched = f"{VENV}.{pip_whl.name}"
    req = f"{VENV}/provisioner-requirements.txt"
    fetch = ("import hashlib, sys, urllib.request\n"
             "data = urllib.request.urlopen(sys.argv[1], timeout=60).read()\n"
             "if hashlib.sha256(data).hexdigest() != sys.argv[3]:\n"
             "    sys.exit(sys.argv[1] + ': not the sha256 the controller downloaded')\n"
             "open(sys.argv[2], 'wb').write(data)\n")
    q = shlex.quote
    return "\n".join([
        "set -e",
        f"python3 -m venv --without-pip {VENV}",
        f"cat > {req} <<'PV_REQUIREMENTS'", *requirements(house.root), "PV_REQUIREMENTS",
        f"python3 -c {q(fetch)} {q(wheels + pip_whl.name)} {fetched} "
        + hashlib.sha256(pip_whl.read_bytes()).hexdigest(),
        f"{VENV}/bin/python {fetched}/pip install --isolated --quiet --no-index "
        f"--find-links {q(wheels)} --trusted-host {q(urlsplit(wheels).netloc)} "
        f"--require-hashes -r {req} --no-compile --no-cache-dir "
        f"--disable-pip-version-check --root-user-action=ignore --report {REPORT}",
        f"rm -f {fetched}", ""])
