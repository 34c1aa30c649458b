"""The lab mirror's stand-in packages: vendor packages (NVIDIA, DOCA, Kubernetes, Helm) and
the headers of the machine's kernel (a lab host runs it; no archive has them) as
dpkg-deb builds with the real name, version and Depends and a marker file as the only
payload, and the plan that closes the roles' package list over those Depends.

No stand-in ships a binary: what needs a GPU or a cluster stays "not verified in the lab".
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.errors import ConfigError
from provisioner.payload import DCGM_APT_EPOCH

SUITE = "bookworm"  # = rootfs.ROOTFS_SUITE: the lab hosts' distribution
ARCH = "amd64"
STANDIN_VERSION = "1"  # bump when stand-in contents change: the cache is rebuilt
MARKER = ("Stand-in built by the provisioner lab (provisioner/lab/standins.py): the real "
          "package's name, version and dependencies, no payload. Not verified in the lab.\n")


@dataclass(frozen=True)
class StandIn:
    """How a vendor package is packaged: its Debian revision and its Depends (`{v}` is the
    package's full version, `{b}` the driver branch)."""

    revision: str
    depends: tuple[str, ...] = ()
    default_version: str = ""  # when the site pins none (with an epoch: a full version)
    epoch: str = ""


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
STANDINS: tuple[tuple[str, StandIn], ...] = (
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
     StandIn("-1", ("datacenter-gpu-manager-4-core (= {v})",), default_version="1:4.5.2-1",
             epoch=DCGM_APT_EPOCH)),
    (r"datacenter-gpu-manager.*", StandIn("-1", default_version="1:4.5.2-1",
                                          epoch=DCGM_APT_EPOCH)),
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
    (r"helm", StandIn("-1")),  # at sources.HELM_VERSION (render.artifacts)
    # the machine's own kernel (profile.lab_kernel_headers): its version is not modelled
    (r"linux-headers-.+", StandIn("-1")),
    (r"(nvidia|cuda|libnvidia|doca|mlnx|nvlsm|libnvsdm).*", StandIn("-1")),
)
# Real neighbouring releases of pinned versions (for upgrade, downgrade and hold tests):
# NVIDIA's R570 datacenter driver releases; Kubernetes patch releases of 1.35 (1.35.9 of
# 2026-09-15, kubernetes.io/releases/1.35; 1.35.7 and 1.35.8 in kubespray's kubeadm
# checksums).
NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "570.124.06": ("570.86.15", "570.133.20"),
    "1.35.8": ("1.35.7", "1.35.9"),
}


def standin_for(name: str) -> StandIn | None:
    for pattern, spec in STANDINS:
        if re.fullmatch(pattern, name):
            return spec
    return None


@dataclass
class MirrorPlan:
    """What the mirror holds: stand-ins (name -> full versions) and real Debian names."""

    standins: dict[str, list[str]] = field(default_factory=dict)
    standin_depends: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    real: set[str] = field(default_factory=set)


def _full_version(spec: StandIn, upstream: str) -> str:
    """A pinned upstream version (4.5.1) as the package carries it (1:4.5.1-1); a default
    with an epoch is one already."""
    return upstream if ":" in upstream else spec.epoch + upstream + spec.revision


def plan(wanted: Mapping[str, str] | Sequence[tuple[str, str]], debian_names: set[str]
         ) -> MirrorPlan:
    """The closure of `wanted` ((name, pinned upstream version or "") pairs; a name may come
    at several versions, e.g. the site's and a release bundle's): Debian's packages where
    Debian has them, stand-ins for the rest, following stand-ins' Depends."""
    out = MirrorPlan()
    top = list(wanted.items()) if isinstance(wanted, Mapping) else list(wanted)
    # (name, version, asked): a name asked for at a second version gets it too, and so do
    # its exact-version dependencies; an unversioned dependency of a planned name adds nothing
    queue = [(n, v, True) for n, v in top]
    seen: set[tuple[str, str]] = set()
    names: set[str] = set()
    while queue:
        name, upstream, asked = queue.pop(0)
        if (name, upstream) in seen or (not asked and not upstream and name in names):
            continue
        seen.add((name, upstream))
        names.add(name)
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
        have = out.standins.setdefault(name, [])
        for up in versions:
            full = _full_version(spec, up)
            if full in have:
                continue
            have.append(full)
            deps = [d.format(v=full, b=branch, s=server) for d in spec.depends]
            out.standin_depends[(name, full)] = deps
            for dep in deps:
                dep_name = dep.split()[0]
                queue.append((dep_name, up if f"(= {full})" in dep else "", False))
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
    proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(work),
                           str(deb) + ".tmp"], capture_output=True, text=True, check=False,
                          timeout=120)
    if proc.returncode != 0:
        raise ConfigError(f"lab mirror: dpkg-deb failed for {name}: {proc.stderr.strip()[-400:]}")
    Path(str(deb) + ".tmp").rename(deb)
    shutil.rmtree(work, ignore_errors=True)
    return deb
