"""Software checks: driver branch and kernel-module flavour against the GPUs placed, CUDA
against the driver, fabric manager against the driver and NVSwitch, the package mirror.

Called from checks.check() as fabric_checks is; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

from provisioner.inventory import compat
from provisioner.inventory.block_models import modules_for
from provisioner.inventory.fields import ip_or_none
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import KeyPath, LoadedSite
from provisioner.inventory.models import OPEN_ONLY_ARCHS, PROPRIETARY_ONLY_ARCHS
from provisioner.inventory.software_models import Software
from provisioner.inventory.topology import has_roce, servers
from provisioner.payload import ARM64_ARCHS
from provisioner.sources import (
    CNI_MANIFESTS,
    GPU_OPERATOR_CHART_VERSION,
    GPU_OPERATOR_KUBERNETES,
    cni_release,
)

Emit = Callable[..., None]

# software.os values the schema knows but the roles cannot install: every package task is
# apt (container_runtime, kubernetes, roce_host, dcgm, fabric_manager).
UNSUPPORTED_OS = {"rhel-9": "the roles install with apt only (no dnf path for containerd, "
                            "Kubernetes, DOCA, DCGM or fabric manager)"}


def _gpu_blocks(loaded: LoadedSite) -> Iterator[tuple[int, str]]:
    for i, p in enumerate(loaded.site.placements):
        block = loaded.catalog.get(p.block)
        if block is not None and block.gpu is not None:
            yield i, block.name


LAST_PRE_TURING_BRANCH = 580  # the last driver branch for Maxwell, Pascal and Volta
# The first driver branch for an architecture: CUDA 12.8 is the first release that builds
# for Blackwell (sm_100; CUDA 12.8 release notes) and needs driver 570.26 (CUDA release
# notes, Table 3).
FIRST_BRANCH = {"blackwell": 570, "grace_blackwell": 570}


def check(loaded: LoadedSite, emit: Emit) -> None:
    """Driver, kernel modules, CUDA, fabric manager and mirror against the GPUs placed."""
    sw = loaded.site.software
    drv = sw.nvidia_driver
    gpu_places = list(_gpu_blocks(loaded))
    blocks = {name for _, name in gpu_places}
    archs = {loaded.catalog[b].gpu.architecture for b in blocks if loaded.catalog[b].gpu}  # type: ignore[union-attr]
    # the blocks that run fabric manager (NVSwitch) or IMEX: a site without (a DGX-1, PCIe
    # servers) installs neither, so no finding speaks of them
    fabric = sorted(b for b in blocks if loaded.catalog[b].nvswitch or loaded.catalog[b].imex)
    if gpu_places and drv is None:
        emit("no-driver", ("software",), "the site has GPU nodes but no software.nvidia_driver",
             "pin a driver branch, for example nvidia_driver: {branch: '570'}", at_key=True)
    if drv is not None:
        volta = sorted(b for b in blocks
                       if loaded.catalog[b].gpu.architecture in PROPRIETARY_ONLY_ARCHS)  # type: ignore[union-attr]
        needs_open = sorted(b for b in blocks
                            if loaded.catalog[b].gpu.architecture in OPEN_ONLY_ARCHS)  # type: ignore[union-attr]
        if drv.kernel_modules == "open" and volta:
            emit("open-modules-unsupported", ("software", "nvidia_driver", "kernel_modules"),
                 f"open kernel modules requested, but {', '.join(volta)} have Volta/Pascal GPUs, "
                 "which only the proprietary modules support",
                 "set kernel_modules: auto (open where supported) or proprietary")
        if volta and int(drv.branch) > LAST_PRE_TURING_BRANCH:
            # "The release 580 series will be the last to support GPUs based on the Maxwell,
            # Pascal, and Volta architectures" (NVIDIA's Unix graphics feature deprecation
            # schedule, forums.developer.nvidia.com/t/60588)
            emit("driver-drops-architecture", ("software", "nvidia_driver", "branch"),
                 f"driver branch {drv.branch} no longer supports {', '.join(volta)} "
                 f"(Maxwell, Pascal or Volta GPUs): branch {LAST_PRE_TURING_BRANCH} is the last",
                 f"pin branch {LAST_PRE_TURING_BRANCH} or older for sites with V100 systems")
        first_of = {b: FIRST_BRANCH.get(loaded.catalog[b].gpu.architecture, 0)  # type: ignore[union-attr]
                    for b in blocks}
        newer_than_driver = sorted(b for b, f in first_of.items() if int(drv.branch) < f)
        if newer_than_driver:
            first = max(first_of[b] for b in newer_than_driver)
            emit("driver-predates-architecture", ("software", "nvidia_driver", "branch"),
                 f"driver branch {drv.branch} predates the GPUs of {', '.join(newer_than_driver)}: "
                 f"their support starts with branch {first}",
                 f"pin branch {first} or newer")
        if drv.kernel_modules == "proprietary" and needs_open:
            emit("proprietary-modules-unsupported",
                 ("software", "nvidia_driver", "kernel_modules"),
                 f"proprietary kernel modules requested, but {', '.join(needs_open)} "
                 "(Blackwell/Grace) require the open modules",
                 "set kernel_modules: auto or open")
        if fabric and sw.fabric_manager.version and drv.version \
                and sw.fabric_manager.version != drv.version:
            emit("fabric-manager-version", ("software", "fabric_manager", "version"),
                 f"fabric manager {sw.fabric_manager.version} differs from driver {drv.version}; "
                 "Fabric Manager refuses to start unless the versions are equal",
                 f"set fabric_manager.version to {drv.version} or leave it out")
        if fabric and sw.fabric_manager.version and not drv.version:
            # the roles install fabric manager at the driver's version (payload.py pins them
            # together): a fabric manager version on its own pins nothing
            emit("fabric-manager-version-without-driver-version",
                 ("software", "fabric_manager", "version"),
                 f"fabric_manager.version {sw.fabric_manager.version} holds nothing on its own: "
                 "fabric manager is installed at the driver's version, and no driver version "
                 "is pinned", f"set nvidia_driver.version: \"{sw.fabric_manager.version}\" "
                 "and drop fabric_manager.version")
        elif fabric and not drv.version and drv.source == "nvidia" \
                and not sw.os.startswith("dgx-os"):
            # Canonical's fabric manager depends on exactly its driver build (the archive's
            # nvidia-fabricmanager-<branch>), so apt keeps those two in step on its own
            emit("fabric-manager-follows-branch", ("software", "nvidia_driver"),
                 f"{', '.join(fabric)} run fabric manager (or IMEX), which starts only at "
                 f"exactly the driver's version; with branch {drv.branch} alone each is the "
                 "newest build when it is installed, so a node added or upgraded later can "
                 "get them from different builds", "pin nvidia_driver.version",
                 severity=Severity.WARNING, at_key=True)
        if sw.cuda:
            _cuda(loaded, emit, sw.cuda, drv.branch, drv.version)
            if compat.cuda_key(sw.cuda) >= (13, 0, 0) and volta:
                # CUDA 13.0 drops offline compilation for Maxwell, Pascal and Volta
                # (CUDA 13.0 release notes, docs.nvidia.com/cuda/cuda-toolkit-release-notes/).
                emit("cuda-drops-architecture", ("software", "cuda"),
                     f"CUDA {sw.cuda} no longer supports Volta ({', '.join(volta)})",
                     "pin CUDA 12.x for sites with V100 systems")
        if drv.kernel_flavour and {a in ARM64_ARCHS for a in archs} == {True, False}:
            emit("kernel-flavour-mixed", ("software", "nvidia_driver", "kernel_flavour"),
                 f"kernel_flavour {drv.kernel_flavour} applies to every GPU node, but the site "
                 "has both Grace (arm64, 64k-page kernels) and x86 GPU nodes",
                 "leave kernel_flavour out (generic, generic-64k on Grace) or keep one "
                 "architecture per site", severity=Severity.WARNING)
        if drv.kernel_flavour and drv.source != "canonical":
            emit("kernel-flavour-unused", ("software", "nvidia_driver", "kernel_flavour"),
                 "kernel_flavour names the flavour of Canonical's precompiled modules; "
                 "with source nvidia the driver is built for the running kernel (DKMS) and "
                 "it is not used", "drop kernel_flavour, or set source: canonical",
                 severity=Severity.WARNING)
        if archs and drv.kernel_modules == "auto" and volta and needs_open:
            emit("mixed-module-flavours", ("software", "nvidia_driver"),
                 "the site mixes GPUs that need proprietary and open modules; each node gets "
                 "its own flavour", severity=Severity.WARNING)
    elif sw.cuda:
        emit("cuda-without-driver", ("software", "cuda"), "CUDA is pinned but no driver is",
             "add software.nvidia_driver")
    nvswitch = sorted({b for b in blocks if loaded.catalog[b].nvswitch})
    if nvswitch and sw.fabric_manager.enabled is False:
        emit("fabric-manager-missing", ("software", "fabric_manager", "enabled"),
             f"{', '.join(nvswitch)} have NVSwitch and need nvidia-fabricmanager, "
             "which the plan disables", "set fabric_manager.enabled: auto")
    if sw.os in UNSUPPORTED_OS:
        emit("os-unsupported", ("software", "os"),
             f"the roles cannot install {sw.os}: {UNSUPPORTED_OS[sw.os]}",
             "use ubuntu-22.04, ubuntu-24.04, dgx-os-6 or dgx-os-7")
    _roce_needs_doca(loaded, emit)
    _gpudirect_rdma(loaded, emit)
    _roce_host_priorities(sw, emit)
    _cni_tested(sw, emit)
    if gpu_places:
        _gpu_operator_supported(sw, emit)
    _mirror_architectures(loaded, emit)
    if drv is not None and drv.source == "canonical" and drv.version and sw.mirror is None:
        # Ubuntu's archive indexes one build of a package per pocket: an exact pin
        # resolves while that build is current, then apt finds no candidate on a new node
        emit("canonical-pin-moves", ("software", "nvidia_driver", "version"),
             f"driver {drv.version} from Canonical's archive: Ubuntu indexes only the "
             "current build of each package in each pocket, so this exact pin stops "
             "resolving for new nodes once Canonical publishes the next one (its modules "
             + ("and fabric manager follow" if fabric else "follow") + " that build)",
             "drop nvidia_driver.version to follow the archive's build of the branch, or "
             "serve a snapshot that keeps it from software.mirror",
             severity=Severity.WARNING)
    if sw.mirror is not None and not sw.mirror.startswith(("http://", "https://", "file://")):
        emit("bad-mirror", ("software", "mirror"), f"mirror '{sw.mirror}' is not a URL",
             "write http://mirror.example/ubuntu or file:///srv/mirror")
    _mirror_without_sources(loaded, emit)
    _names_without_dns(sw, emit)
    if sw.os.startswith("dgx-os"):
        # the installer the tool boots is Ubuntu's: a DGX OS node would come up as plain
        # Ubuntu, which the driver role leaves to DGX OS (no driver); `up` boots none
        emit("dgx-os-adopt-only", ("software", "os"),
             f"software.os {sw.os}: the tool does not network-install DGX OS; `up` takes "
             "DGX OS nodes as installed with --adopt and refuses to boot any other",
             "install DGX OS from NVIDIA's ISO (or keep the factory install), then run "
             "`provision up --adopt 'dgx*'`; or set software.os to ubuntu-22.04/24.04",
             severity=Severity.WARNING)
    if sw.mirror_suites is not None and sw.mirror is None:
        emit("mirror-suites-without-mirror", ("software", "mirror_suites"),
             "mirror_suites is set but no mirror is: the nodes keep their own sources",
             "set software.mirror, or drop mirror_suites", severity=Severity.WARNING)
    if sw.mirror_key is not None and sw.mirror is None:
        emit("mirror-key-without-mirror", ("software", "mirror_key"),
             "mirror_key is set but no mirror is", "set software.mirror, or drop mirror_key")


def _mirror_without_sources(loaded: LoadedSite, emit: Emit) -> None:
    """A site with its own apt mirror is often air-gapped: what it leaves unset comes from
    the internet (sources.py), which such a site cannot reach. Without NTP servers chrony
    gets only the distribution's pool, so the nodes' clocks drift apart and kubeadm's and
    etcd's certificates fail as not yet valid. Said of the site as written (`validate`):
    the lab's own mirror, which the CLI applies after the checks, is not the site's."""

    sw = loaded.site.software
    if sw.mirror is None:
        return
    src, k8s = sw.sources, sw.kubernetes
    unset = [name for name, needed in (
        ("ntp_servers (chrony would use the distribution's pool)", not src.ntp_servers),
        ("registry_mirror (images)", k8s is not None and src.registry_mirror is None),
        ("helm_repo (charts)", k8s is not None and src.helm_repo is None),
        ("manifests (the CNI manifest)", k8s is not None and k8s.cni in CNI_MANIFESTS
         and src.manifests is None)) if needed]
    if unset:
        emit("mirror-without-sources", ("software", "mirror"),
             "software.mirror is set but not these software.sources: " + ", ".join(unset)
             + "; the nodes fetch them from the internet, which an air-gapped site cannot "
             "reach", "set them in software.sources to the site's own servers",
             severity=Severity.WARNING)


def _names_without_dns(sw: Software, emit: Emit) -> None:
    """An installed node has a static address (autoinstall) and gets its resolvers only
    from software.sources.dns_servers: a server the roles reach by name, with none set,
    fails the first apt or image pull on every node, after the install."""
    if sw.sources.dns_servers:
        return
    src = sw.sources
    urls = {"mirror": sw.mirror, "mirror_arm64": sw.mirror_arm64,
            "sources.registry_mirror": src.registry_mirror, "sources.helm_repo": src.helm_repo,
            "sources.manifests": src.manifests}
    named = [(f"software.{key}", urlsplit(url).hostname or "") for key, url in urls.items()
             if url]
    named += [("software.sources.ntp_servers", h) for h in src.ntp_servers]
    names = [(key, host) for key, host in named if host and ip_or_none(host) is None]
    if names:
        emit("names-without-dns", ("software", "sources"),
             "the nodes reach " + ", ".join(f"{h} ({k})" for k, h in names[:3])
             + (f" and {len(names) - 3} more" if len(names) > 3 else "")
             + " by name, but software.sources.dns_servers is empty: an installed node "
             "has a static address and no resolver, so it could not look them up",
             "set software.sources.dns_servers (and dns_search) to the site's resolvers, "
             "or name those servers by address")


def _mirror_architectures(loaded: LoadedSite, emit: Emit) -> None:
    """Ubuntu serves amd64 from its main archive and arm64 from its ports archive: one
    mirror URL for a site with both is a mirror of one of them, unless it merges both."""

    sw = loaded.site.software
    if sw.mirror is None or sw.mirror_arm64 is not None:
        return
    arm = {p.block.gpu is not None and p.block.gpu.architecture in ARM64_ARCHS
           for p in servers(loaded)}
    if arm == {True, False}:
        emit("mirror-one-architecture", ("software", "mirror"),
             "the site has arm64 (Grace) and amd64 servers, and one mirror for both: Ubuntu "
             "publishes arm64 in its ports archive (ports.ubuntu.com/ubuntu-ports), not in "
             "the main archive", "set software.mirror_arm64 to a mirror of the ports "
             "archive, unless software.mirror serves both architectures",
             severity=Severity.WARNING)


def _cni_tested(sw: Software, emit: Emit) -> None:
    """The CNI release is the newest its vendor tests on the cluster's minor (sources.py);
    for a minor no known release is tested on, the nearest one is used, and said."""

    k8s = sw.kubernetes
    if k8s is None:
        return
    version, tested = cni_release(k8s.cni, k8s.version)
    if tested is None:
        emit("cni-untested", ("software", "kubernetes", "version"),
             f"no {k8s.cni} release the project knows is tested on Kubernetes "
             f"{'.'.join(k8s.version.split('.')[:2])}; {k8s.cni} {version} is used",
             f"check {k8s.cni}'s compatibility page for this minor, or pin a Kubernetes "
             "version it lists", severity=Severity.WARNING)


def _gpu_operator_supported(sw: Software, emit: Emit) -> None:
    """The GPU Operator chart is pinned whatever the Kubernetes minor (sources.py): one
    outside the minors its release notes support is said."""

    k8s = sw.kubernetes
    if k8s is None:
        return
    minor = compat.version_tuple(k8s.version)[:2]
    low, high = GPU_OPERATOR_KUBERNETES
    if not low <= minor <= high:
        emit("gpu-operator-unsupported", ("software", "kubernetes", "version"),
             f"the GPU Operator {GPU_OPERATOR_CHART_VERSION} the project pins supports "
             f"Kubernetes {low[0]}.{low[1]} to {high[0]}.{high[1]}, not "
             f"{minor[0]}.{minor[1]}", "pin a Kubernetes version in that range, or check "
             "the GPU Operator's platform support page before going on",
             severity=Severity.WARNING)


def _roce_host_priorities(sw: Software, emit: Emit) -> None:
    """The host sets `mlnx_qos --trust dscp` and leaves the NIC's DSCP-to-priority map at
    mlx5's default, priority = DSCP / 8 (mlnx_qos -i shows "prio:3 dscp:31,...,24", the
    output fabric/live.py reads, tests/unit/test_fabric_live.py). A site priority off that map
    gets PFC and ECN on a priority the host never sends on: the switch and host disagree."""
    roce = sw.roce
    for what, dscp, prio, key in (("RoCE", roce.dscp, roce.priority, "priority"),
                                  ("CNP", roce.cnp_dscp, roce.cnp_priority, "cnp_priority")):
        if dscp >> 3 != prio:
            emit("roce-priority-off-the-host-map", ("software", "roce", key),
                 f"{what} DSCP {dscp} is priority {dscp >> 3} on the hosts (the NIC's "
                 f"default map in trust-dscp mode, DSCP / 8), not {key} {prio}",
                 f"set {key}: {dscp >> 3}, or a DSCP from {prio * 8} to {prio * 8 + 7}",
                 at_key=True)


def _first_three(names: list[str]) -> str:
    """Node names for a finding: the first three, then how many more."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _roce_needs_doca(loaded: LoadedSite, emit: Emit) -> None:
    """The RoCE QoS (roce_host) sets trust, PFC and ToS with DOCA-OFED's tools (mlnx_qos,
    cma_roce_tos) and its mlx5 sysfs (ecn/): on Ubuntu's inbox driver they do not exist, so
    the QoS would fail on every RoCE node at every boot. DGX OS brings NVIDIA's own OFED
    builds (MLNX_OFED's release notes list versions "for DGX H100 systems only")."""

    sw = loaded.site.software
    if sw.doca is not None or sw.os.startswith("dgx-os"):
        return
    roce = sorted(n.hostname for p in loaded.site.placements for n in p.nodes
                  if has_roce(loaded, n))
    if roce:
        shown = _first_three(roce)
        emit("roce-without-doca", ("software",),
             f"{shown} {'has' if len(roce) == 1 else 'have'} an address on a RoCE network, "
             "but software.doca is not set: "
             "the RoCE QoS needs DOCA-OFED (mlnx_qos, cma_roce_tos)",
             "pin DOCA, for example doca: \"2.9.1\" (its repository, or the site mirror, "
             "must serve doca-ofed)", at_key=True)


def _gpudirect_rdma(loaded: LoadedSite, emit: Emit) -> None:
    """GPUDirect RDMA (the NIC reading GPU memory, what NCCL over RoCE relies on) goes
    through DMA-BUF with the open kernel modules; the proprietary ones need nvidia-peermem,
    built against the RDMA stack DOCA installs (its Kbuild looks for MOFED's peer-memory
    symbols, else the module refuses to load), and loaded (GPU Operator, "GPUDirect RDMA and
    GPUDirect Storage": DMA-BUF recommended, nvidia-peermem the legacy path). The roles
    build the driver before DOCA and load no nvidia-peermem, so such nodes would stage GPU
    traffic through host memory without a word."""

    sw = loaded.site.software
    drv = sw.nvidia_driver
    if drv is None or sw.os.startswith("dgx-os"):
        return  # DGX OS brings its own driver, OFED and peer-memory setup
    nodes = sorted(n.hostname for p in loaded.site.placements for n in p.nodes
                   if (block := loaded.catalog.get(p.block)) is not None and block.gpu
                   and has_roce(loaded, n)
                   and modules_for(drv.kernel_modules, int(drv.branch), block) == "proprietary")
    if nodes:
        shown = _first_three(nodes)
        emit("gpudirect-rdma-without-dma-buf", ("software", "nvidia_driver", "kernel_modules"),
             f"{shown} {'is a GPU node' if len(nodes) == 1 else 'are GPU nodes'} on a RoCE "
             f"network with the proprietary kernel modules (branch {drv.branch}, "
             f"kernel_modules: {drv.kernel_modules}): GPUDirect RDMA then needs "
             "nvidia-peermem built against DOCA, which the roles neither build nor load, so "
             "NCCL would stage GPU traffic through host memory",
             "set kernel_modules: open (Turing and newer; GPUDirect RDMA through DMA-BUF), "
             "or build and load nvidia-peermem after DOCA yourself (V100 systems)",
             severity=Severity.WARNING, at_key=True)


def _cuda(loaded: LoadedSite, emit: Emit, cuda: str, branch: str, version: str | None) -> None:
    minimum, exact = compat.cuda_min_driver(cuda)
    path: KeyPath = ("software", "cuda")
    if minimum is None:
        emit("cuda-unknown", path, f"CUDA {cuda} is older than every release this tool knows",
             severity=Severity.WARNING)
        return
    key = compat.cuda_key(cuda)
    if key > compat.newest_cuda_listed() and not exact:
        emit("cuda-unknown", path,
             f"CUDA {cuda} is newer than the releases this tool knows; checked against "
             f"{minimum} as a lower bound only", severity=Severity.WARNING)
    elif (*key[:2], 0) not in compat.CUDA_MIN_DRIVER:  # a release the table lacks (12.3)
        emit("cuda-unknown", path,
             f"CUDA {key[0]}.{key[1]} is not among the releases this tool knows; checked "
             f"against {minimum}, an older release's minimum, as a lower bound only",
             "check its minimum driver in the CUDA release notes (Table 3)",
             severity=Severity.WARNING)
    pinned = version or branch
    ok = (compat.driver_satisfies(version, minimum) if version
          else int(branch) >= compat.version_tuple(minimum)[0])
    if not ok:
        emit("cuda-needs-newer-driver", path,
             f"CUDA {cuda} needs driver >= {minimum}; the pinned driver is {pinned}",
             f"pin nvidia_driver to {minimum.split('.')[0]} or newer, or an older CUDA")
    elif version is None and int(branch) == compat.version_tuple(minimum)[0]:
        emit("cuda-driver-unchecked", ("software", "nvidia_driver", "branch"),
             f"CUDA {cuda} needs driver >= {minimum}; branch {branch} alone cannot prove it",
             "pin nvidia_driver.version too", severity=Severity.WARNING)
