"""The lab's signed apt mirror: what an air-gapped site's mirror is, on the lab's network.

`provision lab up` builds it from the packages the rendered roles install
(`render.artifacts`, the same data `provision render --artifacts` prints), signs it with a
GPG key made for this lab, and serves it over HTTP on the management network's gateway. The
lab overlay points `software.mirror` and `software.mirror_key` at it, so the roles install
with real apt, verifying `InRelease` through `signed-by`, exactly as on a site.

- Packages Debian has (chrony, containerd, rdma-core, the dependencies of the stand-ins)
  are the real ones, downloaded with apt for the lab hosts' suite and cached.
- NVIDIA, DOCA and Kubernetes packages are stand-ins built with dpkg-deb: the real name,
  version and Depends, and a marker file under /usr/share/doc/<package>/ as the only
  payload (no binary: what needs a GPU or a cluster stays "not verified in the lab").
  Packages pinned to a version get a real older and newer release beside it, for upgrades,
  downgrades and holds.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

from provisioner.errors import ConfigError

SUITE = "bookworm"  # = hosts.ROOTFS_SUITE: the lab hosts' distribution
COMPONENTS = ("main", "restricted", "universe", "multiverse")  # base_os_mirror_components
ARCH = "amd64"
DEBIAN_URL = "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
KEY_NAME = "provisioner-lab-mirror.asc"
STANDIN_VERSION = "1"  # bump when stand-in contents change: the cache is rebuilt
MARKER = ("Stand-in built by the provisioner lab (provisioner/lab/mirror.py): the real "
          "package's name, version and dependencies, no payload. Not verified in the lab.\n")


@dataclass(frozen=True)
class StandIn:
    """How a vendor package is packaged: its Debian revision and its Depends (`{v}` is the
    package's full version, `{b}` the driver branch)."""

    revision: str
    depends: tuple[str, ...] = ()
    default_version: str = ""  # when the site pins none


# Vendor packaging, from the vendors' own control files and Packages indexes:
# - Kubernetes: github.com/kubernetes/release, packages/deb control templates (kubeadm
#   Depends kubelet, kubectl, kubernetes-cni, cri-tools; kubelet Depends iptables,
#   kubernetes-cni, iproute2, socat, util-linux, mount, ethtool, ebtables, conntrack);
#   pkgs.k8s.io revisions are "-1.1".
# - NVIDIA driver: Ubuntu's -server packages (revision 0ubuntu0.<release>.1) and the same
#   packaging in NVIDIA's CUDA repository (revision 0ubuntu1); in both the driver metapackage
#   Depends on its libraries and utilities at exactly its own version (= ${binary:Version}
#   in Ubuntu's nvidia-graphics-drivers control), which is why the role pins them together.
#   Fabric manager, nscq, IMEX and CUDA packages: revision -1. DCGM 4: epoch 1, 4.5.2-1,
#   the -cuda<N> package Depends datacenter-gpu-manager-4-core at its version.
# - nvidia-container-toolkit's debian/control in github.com/NVIDIA/nvidia-container-toolkit
#   (toolkit-base =, libnvidia-container-tools >=).
# - DOCA: doca-ofed pulls the RDMA user space (rdma-core, ibverbs-utils, infiniband-diags:
#   real Debian packages here) and Mellanox's own tools (stand-ins).
# - Helm: helm.sh's apt repository (packages.buildkite.com/helm-linux/helm-debian).
_DRIVER_DEPS = ("nvidia-utils-{b}{s} (= {v})", "libnvidia-compute-{b}{s} (= {v})",
                "nvidia-kernel-common-{b}{s} (= {v})")
_STANDINS: tuple[tuple[str, StandIn], ...] = (
    (r"kubeadm", StandIn("-1.1", ("kubelet (>= 1.30.0)", "kubectl (>= 1.30.0)",
                                  "kubernetes-cni (>= 1.2.0)", "cri-tools (>= 1.30.0)"))),
    (r"kubelet", StandIn("-1.1", ("iptables (>= 1.4.21)", "kubernetes-cni (>= 1.2.0)",
                                  "iproute2", "socat", "util-linux", "mount", "ethtool",
                                  "ebtables", "conntrack"))),
    (r"kubectl", StandIn("-1.1")),
    (r"kubernetes-cni", StandIn("-1.1", default_version="1.5.1")),
    (r"cri-tools", StandIn("-1.1", default_version="1.31.1")),
    (r"(nvidia-driver|nvidia-headless-no-dkms)-(\d+)-server(-open)?",
     StandIn("-0ubuntu0.22.04.1", _DRIVER_DEPS, default_version="570.124.06")),
    (r"nvidia-driver-(\d+)(-open)?",
     StandIn("-0ubuntu1", _DRIVER_DEPS, default_version="570.124.06")),
    (r"nvidia-utils-(\d+)-server",
     StandIn("-0ubuntu0.22.04.1", ("libnvidia-compute-{b}{s} (= {v})",),
             default_version="570.124.06")),
    (r"nvidia-utils-(\d+)",
     StandIn("-0ubuntu1", ("libnvidia-compute-{b}{s} (= {v})",), default_version="570.124.06")),
    (r"(libnvidia-compute|nvidia-kernel-common)-(\d+)-server",
     StandIn("-0ubuntu0.22.04.1", default_version="570.124.06")),
    (r"(libnvidia-compute|nvidia-kernel-common)-(\d+)",
     StandIn("-0ubuntu1", default_version="570.124.06")),
    (r"(nvidia-fabricmanager|libnvidia-nscq|nvidia-imex|libnvsdm)(-\d+)?",
     StandIn("-1", default_version="570.124.06")),
    (r"linux-modules-nvidia-.*", StandIn("-1")),  # its version is the kernel's: not modelled
    (r"cuda-toolkit-(\d+)-(\d+)", StandIn("-1", default_version="12.8.0")),
    (r"datacenter-gpu-manager-4-cuda\d+",
     StandIn("", ("datacenter-gpu-manager-4-core (= {v})",), default_version="1:4.5.2-1")),
    (r"datacenter-gpu-manager.*", StandIn("", default_version="1:4.5.2-1")),
    (r"nvidia-container-toolkit", StandIn("-1", ("nvidia-container-toolkit-base (= {v})",
                                                 "libnvidia-container-tools (>= {v})"),
                                          default_version="1.17.4")),
    (r"nvidia-container-toolkit-base", StandIn("-1", default_version="1.17.4")),
    (r"libnvidia-container-tools", StandIn("-1", ("libnvidia-container1 (>= {v})",),
                                           default_version="1.17.4")),
    (r"libnvidia-container1", StandIn("-1", default_version="1.17.4")),
    (r"doca-ofed", StandIn("-1", ("mlnx-ofed-kernel-utils", "mlnx-tools", "rdma-core",
                                  "ibverbs-utils", "infiniband-diags"),
                           default_version="2.9.1")),
    (r"mlnx-ofed-kernel-utils", StandIn("-1", default_version="24.10.OFED.24.10.1.1.4.1")),
    (r"mlnx-tools", StandIn("-1", default_version="24.10.0")),
    (r"helm", StandIn("-1", default_version="3.17.3")),
    (r"(nvidia|cuda|libnvidia|doca|mlnx|nvlsm|libnvsdm).*", StandIn("-1")),
)
# Real neighbouring releases of pinned versions (for upgrade, downgrade and hold tests):
# NVIDIA's R570 datacenter driver releases; Kubernetes patch releases of 1.31.
NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "570.124.06": ("570.86.15", "570.133.20"),
    "1.31.4": ("1.31.3", "1.31.5"),
}


def standin_for(name: str) -> StandIn | None:
    for pattern, spec in _STANDINS:
        if re.fullmatch(pattern, name):
            return spec
    return None


@dataclass
class MirrorPlan:
    """What the mirror holds: stand-ins (name -> full versions) and real Debian names."""

    standins: dict[str, list[str]] = field(default_factory=dict)
    standin_depends: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    real: set[str] = field(default_factory=set)


@dataclass
class MirrorInfo:
    """A built mirror: its directory, the public key, counts and build time."""

    root: Path
    key_file: Path
    real_debs: int
    standin_debs: int
    build_s: float
    packages: list[str] = field(default_factory=list)


def _run(argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 600,
         cwd: Path | None = None) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False, env=env, cwd=cwd)
    if proc.returncode != 0:
        raise ConfigError(f"lab mirror: `{' '.join(argv[:3])}` failed: "
                          f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout


def _full_version(spec: StandIn, upstream: str) -> str:
    return upstream if ":" in upstream and not spec.revision else upstream + spec.revision


def plan(wanted: dict[str, str], debian_names: set[str]) -> MirrorPlan:
    """The closure of `wanted` (name -> pinned upstream version or ""): Debian's packages
    where Debian has them, stand-ins for the rest, following stand-ins' Depends."""
    out = MirrorPlan()
    queue = list(wanted.items())
    seen: set[str] = set()
    while queue:
        name, upstream = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        spec = standin_for(name)
        if spec is None:
            if name not in debian_names:
                raise ConfigError(f"lab mirror: package {name} is neither in Debian {SUITE} "
                                  "nor a known vendor package",
                                  hint="add a stand-in to provisioner/lab/mirror.py")
            out.real.add(name)
            continue
        base = upstream or spec.default_version or "1.0"
        branch = next(iter(re.findall(r"-(\d{3})(?:-|$)", name)), "")
        server = "-server" if f"-{branch}-server" in name else ""
        versions = [base, *NEIGHBOURS.get(base, ())]
        out.standins[name] = []
        for up in versions:
            full = _full_version(spec, up)
            out.standins[name].append(full)
            deps = [d.format(v=full, b=branch, s=server) for d in spec.depends]
            out.standin_depends[(name, full)] = deps
            for dep in deps:
                dep_name = dep.split()[0]
                queue.append((dep_name, up if f"(= {full})" in dep else ""))
    return out


def build_standin(cache: Path, name: str, version: str, depends: list[str]) -> Path:
    """One stand-in .deb (cached by name, version and Depends)."""
    digest = hashlib.sha256(f"{STANDIN_VERSION}|{name}|{version}|{depends}".encode())
    deb = cache / f"{name}_{version.replace(':', '%3a')}_{ARCH}_{digest.hexdigest()[:8]}.deb"
    if deb.exists():
        return deb
    work = cache / f".build-{name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    doc = work / "usr/share/doc" / name
    doc.mkdir(parents=True)
    (doc / "PROVISIONER-LAB-STAND-IN").write_text(MARKER)
    (work / "DEBIAN").mkdir()
    control = [f"Package: {name}", f"Version: {version}", f"Architecture: {ARCH}",
               "Maintainer: provisioner lab <lab@provisioner.invalid>",
               "Section: misc", "Priority: optional"]
    if depends:
        control.append("Depends: " + ", ".join(depends))
    control.append(f"Description: lab stand-in for {name}\n {MARKER.strip()}")
    (work / "DEBIAN/control").write_text("\n".join(control) + "\n")
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(work), str(deb) + ".tmp"])
    Path(str(deb) + ".tmp").rename(deb)
    shutil.rmtree(work, ignore_errors=True)
    return deb


class DebianCache:
    """apt on the controller, configured for the lab hosts' suite, with its own lists and
    archive cache (outside the lab's state, so builds after the first download nothing)."""

    def __init__(self, cache: Path, rootfs: Path) -> None:
        self.root = cache
        self.rootfs = rootfs
        for sub in ("lists/partial", "archives/partial", "etc/preferences.d", "state"):
            (cache / sub).mkdir(parents=True, exist_ok=True)
        (cache / "etc/sources.list").write_text(
            f"deb [signed-by={DEBIAN_KEYRING}] {DEBIAN_URL} {SUITE} main\n")
        self.opts = [
            "-o", f"Dir::Etc::SourceList={cache / 'etc/sources.list'}",
            "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::Etc::Preferences={cache / 'etc/preferences'}",
            "-o", f"Dir::Etc::PreferencesParts={cache / 'etc/preferences.d'}",
            "-o", f"Dir::State::Lists={cache / 'lists'}",
            "-o", f"Dir::State={cache / 'state'}",
            # what the lab hosts already have: only the rest is downloaded
            "-o", f"Dir::State::status={rootfs / 'var/lib/dpkg/status'}",
            "-o", f"Dir::Cache={cache}",
            "-o", f"Dir::Cache::archives={cache / 'archives'}",
            "-o", f"APT::Architecture={ARCH}", "-o", "APT::Install-Recommends=false",
            "-o", "Debug::NoLocking=true", "-o", "APT::Sandbox::User=root"]

    def update(self, max_age_s: float = 86400.0) -> None:
        lists = list((self.root / "lists").glob("*_Packages*"))
        if lists and time.time() - min(p.stat().st_mtime for p in lists) < max_age_s:
            return
        _run(["apt-get", *self.opts, "-qq", "update"], timeout=900)

    def names(self) -> set[str]:
        return set(_run(["apt-cache", *self.opts, "pkgnames"]).split())

    def fetch(self, names: set[str]) -> list[Path]:
        """The .debs of `names` and their dependencies missing from the lab hosts."""
        if not names:
            return []
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        sim = _run(["apt-get", *self.opts, "-s", "-qq", "install", *sorted(names)], env=env)
        wanted: list[tuple[str, str]] = re.findall(
            r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ", sim, re.MULTILINE)
        if wanted:
            _run(["apt-get", *self.opts, "-qq", "-y", "--download-only", "install",
                  *sorted(names)], env=env, timeout=1800)
        # the named packages themselves even when the lab hosts have them (chrony)
        have = set(wanted)
        for name in sorted(names):
            if not any(n == name for n, _ in have):
                policy = _run(["apt-cache", *self.opts, "policy", name])
                cand = re.search(r"Candidate: (\S+)", policy)
                if cand is None or cand[1] == "(none)":
                    raise ConfigError(f"lab mirror: Debian {SUITE} has no {name}")
                if not list((self.root / "archives").glob(
                        f"{name}_{cand[1].replace(':', '%3a')}_*.deb")):
                    _run(["apt-get", *self.opts, "-qq", "download", name], env=env,
                         cwd=self.root / "archives")
                have.add((name, cand[1]))
        debs = []
        for name, version in sorted(have):
            deb = next((self.root / "archives").glob(
                f"{name}_{version.replace(':', '%3a')}_*.deb"), None)
            if deb is None:
                raise ConfigError(f"lab mirror: apt did not download {name} {version}")
            debs.append(deb)
        return debs


def _release(dist: Path) -> str:
    files = sorted(p for p in dist.rglob("*") if p.is_file())
    lines = ["Origin: provisioner-lab", "Label: provisioner lab mirror", f"Suite: {SUITE}",
             f"Codename: {SUITE}", f"Date: {formatdate(usegmt=True)}",
             f"Architectures: {ARCH}", f"Components: {' '.join(COMPONENTS)}",
             "Description: the lab's site mirror (provisioner/lab/mirror.py)"]
    for title, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{title}:")
        for p in files:
            data = p.read_bytes()
            digest = hashlib.new(algo, data).hexdigest()
            lines.append(f" {digest} {len(data):>8} {p.relative_to(dist)}")
    return "\n".join(lines) + "\n"


def _gpg(home: Path) -> list[str]:
    return ["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback",
            "--passphrase", ""]


def make_key(home: Path) -> tuple[str, str]:
    """A signing key for this lab (private GNUPGHOME): (fingerprint, armored public key)."""
    home.mkdir(parents=True, mode=0o700, exist_ok=True)
    _run([*_gpg(home), "--quick-generate-key", "provisioner lab mirror <lab@provisioner.invalid>",
          "ed25519", "sign", "1y"])
    listing = _run([*_gpg(home), "--with-colons", "--list-secret-keys"])
    fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    return fpr, _run([*_gpg(home), "--armor", "--export", fpr])


def build(wanted: dict[str, str], out: Path, gnupg_home: Path, cache: Path, rootfs: Path
          ) -> MirrorInfo:
    """Build the signed repository in `out` (dists/, pool/) for the wanted packages."""
    for tool in ("gpg", "dpkg-deb", "dpkg-scanpackages", "apt-get"):
        if shutil.which(tool) is None:
            raise ConfigError(f"lab mirror: {tool} is not installed",
                              hint="apt-get install gnupg dpkg-dev (scripts/bootstrap.sh)")
    started = time.monotonic()
    debian = DebianCache(cache / f"debian-{SUITE}", rootfs)
    debian.update()
    p = plan(wanted, debian.names())
    standin_cache = cache / "standins"
    standin_cache.mkdir(parents=True, exist_ok=True)
    pool = out / "pool/main"
    shutil.rmtree(out, ignore_errors=True)
    pool.mkdir(parents=True)
    standins = [build_standin(standin_cache, name, v, p.standin_depends[(name, v)])
                for name, versions in sorted(p.standins.items()) for v in versions]
    reals = debian.fetch(p.real)
    for deb in [*standins, *reals]:
        dest = pool / (deb.name if deb in reals else deb.name.rsplit("_", 1)[0] + ".deb")
        try:
            os.link(deb, dest)
        except OSError:
            shutil.copy2(deb, dest)
    key_file = publish(out, gnupg_home)
    return MirrorInfo(root=out, key_file=key_file, real_debs=len(reals),
                      standin_debs=len(standins), build_s=time.monotonic() - started,
                      packages=sorted(p.standins) + sorted(p.real))


def publish(out: Path, gnupg_home: Path) -> Path:
    """Index `out`/pool/main (Packages, Release) and sign it with a new lab key (InRelease,
    Release.gpg): returns the armored public key that apt's signed-by names."""
    dist = out / "dists" / SUITE
    for comp in COMPONENTS:
        (dist / comp / f"binary-{ARCH}").mkdir(parents=True, exist_ok=True)
    packages = _scan(out)
    for comp in COMPONENTS:
        text = packages if comp == "main" else ""
        bdir = dist / comp / f"binary-{ARCH}"
        (bdir / "Packages").write_text(text)
        with gzip.open(bdir / "Packages.gz", "wt") as fh:
            fh.write(text)
    (dist / "Release").write_text(_release(dist))
    fpr, public = make_key(gnupg_home)
    _run([*_gpg(gnupg_home), "--local-user", fpr, "--clearsign", "--digest-algo", "SHA256",
          "--output", str(dist / "InRelease"), str(dist / "Release")])
    _run([*_gpg(gnupg_home), "--local-user", fpr, "--armor", "--detach-sign",
          "--digest-algo", "SHA256", "--output", str(dist / "Release.gpg"),
          str(dist / "Release")])
    key_file = out / KEY_NAME
    key_file.write_text(public)
    return key_file


def _scan(root: Path) -> str:
    """The Packages index of pool/ (dpkg-scanpackages, every version kept)."""
    proc = subprocess.run(["dpkg-scanpackages", "--multiversion", "pool/main", "/dev/null"],
                          capture_output=True, text=True, cwd=root, check=False, timeout=300)
    if proc.returncode != 0:
        raise ConfigError(f"lab mirror: dpkg-scanpackages failed: {proc.stderr.strip()[-400:]}")
    return proc.stdout


def serve_argv(root: Path, address: str, port: int) -> list[str]:
    """The mirror's HTTP server: Python's http.server, bound to the lab gateway only."""
    return [sys.executable, "-m", "http.server", "--bind", address, "--directory", str(root),
            str(port)]


def wanted(artifacts: Sequence[dict[str, str]]) -> dict[str, str]:
    """Package name -> pinned upstream version ("" when unpinned), from what
    `render.artifacts` says the rendered roles install."""
    out: dict[str, str] = {}
    for item in artifacts:
        if item["kind"] == "package":
            out[item["name"]] = item["version"]
    return out
