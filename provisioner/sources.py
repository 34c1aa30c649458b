"""Where the roles fetch from: upstream by default, the site's own sources when it sets them.

Every internet address the payload uses is here and nowhere in the roles, so a site with
its mirror and `software.sources` set renders a project that names no internet host
(tests/unit/test_airgap.py). The roles' defaults hold empty strings; a repository task runs
only when its URL is set. Pure: no I/O.

Upstream addresses, each from its vendor's install page:
- NVIDIA CUDA repository: developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/,
  arch x86_64 or sbsa (Grace), key 3bf863cc (NVIDIA driver installation guide, network
  repository). [P]
- NVIDIA Container Toolkit: nvidia.github.io/libnvidia-container/stable/deb/<arch>, key
  gpgkey (Container Toolkit install guide). [P]
- Kubernetes: pkgs.k8s.io/core:/stable:/v<minor>/deb/, key Release.key (kubeadm install). [P]
- DOCA: linux.mellanox.com/public/repo/doca/<version>/<ubuntuXX.YY>/<x86_64|arm64-sbsa>/
  (DOCA installation guide). [S]
- Helm: packages.buildkite.com/helm-linux/helm-debian (helm.sh "Installing Helm", apt). [S]
- Charts: helm.ngc.nvidia.com/nvidia (GPU and Network Operator), helm.cilium.io (Cilium). [P]
- CNI manifests: Calico and Flannel release manifests, pinned (versions below). [P]
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from provisioner.inventory.compat import version_tuple
from provisioner.inventory.software_models import Software

CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos"
TOOLKIT_REPO = "https://nvidia.github.io/libnvidia-container/stable/deb"
TOOLKIT_KEY = "https://nvidia.github.io/libnvidia-container/gpgkey"
K8S_REPO = "https://pkgs.k8s.io/core:/stable:"
DOCA_REPO = "https://linux.mellanox.com/public/repo/doca"
DOCA_KEY = "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub"
HELM_APT_REPO = "https://packages.buildkite.com/helm-linux/helm-debian/any/"
HELM_APT_KEY = "https://packages.buildkite.com/helm-linux/helm-debian/gpgkey"
# The Helm CLI on the first control plane, pinned like everything else: unpinned, a new
# cluster got whatever the repository held newest that day (Helm 4, whose CLI renamed flags,
# is out since November 2025) and an old one kept its first, and an air-gapped mirror could
# not say which to hold. 3.22.0 is Helm 3's last minor release (helm/helm-www
# PR #2245, 2026-09-10), with security fixes until 2027-02-10 (helm.sh blog "Helm 3 End of
# Life"); the roles' helm commands are Helm 3's. [S]
HELM_VERSION = "3.22.0"
NVIDIA_CHARTS = "https://helm.ngc.nvidia.com/nvidia"
CILIUM_CHARTS = "https://helm.cilium.io/"
# Pinned CNI releases per Kubernetes minor: each release with the first and last minor its
# vendor tests it on, oldest first; a cluster gets the newest release tested on its minor,
# so a minor-by-minor Kubernetes upgrade moves its CNI a minor at a time too (Cilium's
# upgrade guide: "between consecutive minor releases" only). Every CNI the inventory
# accepts has one (tests/unit/test_kubernetes_payload.py).
# - Calico: "System requirements for Kubernetes" of each minor ("We test Calico ... against
#   the following Kubernetes versions", docs.tigera.io/calico/<minor>/getting-started/
#   kubernetes/requirements); newest patch tags of projectcalico/calico (August 2026). [P]
# - Cilium: Documentation/network/kubernetes/compatibility.rst of v1.18.14 and v1.19.3
#   ("All Kubernetes versions listed are e2e tested"); patches from helm.cilium.io. [S]
# - Flannel: its README, "For Kubernetes v1.17+". [P]
CniRelease = tuple[str, tuple[int, int], tuple[int, int]]
CNI_RELEASES: dict[str, tuple[CniRelease, ...]] = {
    "calico": (("v3.28.5", (1, 27), (1, 30)), ("v3.29.7", (1, 29), (1, 32)),
               ("v3.30.7", (1, 31), (1, 35)), ("v3.31.7", (1, 32), (1, 35)),
               ("v3.32.1", (1, 34), (1, 36)), ("v3.33.0", (1, 35), (1, 37))),
    "cilium": (("1.18.14", (1, 30), (1, 33)), ("1.19.6", (1, 32), (1, 35))),
    "flannel": (("v0.25.7", (1, 17), (1, 99)),),
}
CNI_MANIFESTS = {
    "calico": ("https://raw.githubusercontent.com/projectcalico/calico/{v}/manifests/",
               "calico.yaml"),
    "flannel": ("https://github.com/flannel-io/flannel/releases/download/{v}/",
                "kube-flannel.yml"),
}
# Operator charts (NGC chart repository helm.ngc.nvidia.com/nvidia), the releases NVIDIA
# supports today: "26.7.x Supported | 26.3.x Deprecated | 25.10.x and lower End of Support"
# (GPU Operator platform support) and "26.7.x Supported | 26.4.x Deprecated | 26.1.x and
# lower End of Support" (Network Operator v26.7.0 platform support,
# docs.nvidia.com/networking/display/kubernetes2670) [P]. Both support upgrades only within
# a release line or to the next one (their life-cycle policies), and the role installs the
# pinned chart only (bundles record charts, they install none): a cluster on an older line
# is refused before helm (helm_release.yml) and moved by hand, a line at a time
# (docs/upgrade.md, "The operators").
GPU_OPERATOR_CHART_VERSION = "v26.7.0"  # NVIDIA/gpu-operator tag v26.7.0, 2026-08-20 [S]
# The Kubernetes minors it supports: "1.33---1.36" (gpu-operator/platform-support.rst,
# NVIDIA/cloud-native-docs tag gpu-operator-v26.7-1) [S].
GPU_OPERATOR_KUBERNETES = ((1, 33), (1, 36))
# The lines a deployed release may move to the pinned one from: its own and the one before
# (26.3, NVIDIA/gpu-operator tag v26.3.0) [S].
GPU_OPERATOR_UPGRADE_FROM = ("26.3", "26.7")
# The chart's version carries no "v" (Chart.yaml `version: 26.7.0-rc.2` on the v26.7.x
# branch, as 25.7.0 and 26.4.1 before it); the components' images are tagged
# network-operator-v<version> in nvcr.io/nvidia/mellanox (the NicClusterPolicy example of
# each release; confirmed for 26.4.1's, hack/release.yaml) [S].
NETWORK_OPERATOR_CHART_VERSION = "26.7.0"
NETWORK_OPERATOR_COMPONENT_VERSION = "network-operator-v26.7.0"
NETWORK_OPERATOR_UPGRADE_FROM = ("26.4", "26.7")  # 26.4.1, 2026-07-24 [S]
KUBE_VIP_IMAGE = "ghcr.io/kube-vip/kube-vip"
KUBE_VIP_VERSION = "v1.2.3"  # kube-vip tag v1.2.3, 2026-08-10 [S]
# Where the Network Operator's components live (its chart's values.yaml) [S].
NETWORK_OPERATOR_REPOSITORY = "nvcr.io/nvidia/mellanox"
PAUSE_IMAGE = "registry.k8s.io/pause"
# The pause image kubeadm uses for each Kubernetes minor (PauseVersion in kubeadm's
# cmd/kubeadm/app/constants/constants.go): 3.7 for 1.24, 3.8 for 1.25 (minikube's kubeadm
# image table), 3.9 from 1.26 (kubesphere/kubekey#2138 citing v1.26.0's constants), 3.10
# from 1.31 (CHANGELOG-1.31, kubernetes#125112; release-1.32's constants),
# 3.10.1 from 1.34 (kubernetes#130713; kubespray's pod_infra_supported_versions for 1.34
# and 1.35), 3.10.2 from 1.36 (kubeclipper#947) [S]. containerd's sandbox image is set to
# the same tag: kubeadm's preflight pulls its own (`kubeadm config images list`), so with a
# different one an air-gapped mirror must hold two, and kubeadm warns that they differ.
PAUSE_TAGS: tuple[tuple[tuple[int, int], str], ...] = (
    ((1, 36), "3.10.2"), ((1, 34), "3.10.1"), ((1, 31), "3.10"), ((1, 26), "3.9"),
    ((1, 25), "3.8"), ((0, 0), "3.7"))  # pkgs.k8s.io starts at 1.24
DEFAULT_NTP_POOL = "ntp.ubuntu.com"


# containerd 1.x answers no RuntimeConfig RPC, and the kubelet falls back to its own
# cgroupDriver setting until that fallback is removed (KEP-4033). The v1.35 release blog
# named 1.35 the last release for containerd 1.x, but SIG Node deferred the removal, first
# to 1.37 (kubernetes#136846), then to 1.38 to outlast containerd 1.7's end of life
# (kubernetes#139121, enhancements#6087, website#55954): from 1.38 the kubelet needs 2.0.
CONTAINERD_2_FROM = (1, 38)


def cni_release(cni: str, kubernetes_version: str) -> tuple[str, CniRelease | None]:
    """The CNI version to pin for this Kubernetes version, and the release it is when its
    vendor tests it on that minor (None: nearest known release, untested; validate warns)."""
    minor = version_tuple(kubernetes_version)[:2]
    releases = CNI_RELEASES[cni]
    tested = [r for r in releases if r[1] <= minor <= r[2]]
    if tested:
        return tested[-1][0], tested[-1]
    return (releases[0] if minor < releases[0][1] else releases[-1])[0], None


def pause_tag(kubernetes_version: str) -> str:
    """The pause image tag kubeadm of this Kubernetes version pulls."""
    minor = version_tuple(kubernetes_version)[:2]
    return next(tag for since, tag in PAUSE_TAGS if minor >= since)


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def registry_host(url: str) -> str:
    """http://mirror.lab:5000/ -> mirror.lab:5000 (the host images are named under)."""
    return urlsplit(url).netloc


def host_repo_vars(sw: Software, arch: str, repo_arch: str, distro: str) -> dict[str, Any]:
    """Per-host apt repository URLs (they depend on the CPU architecture). Empty with a
    mirror: every package then comes from the mirror base_os writes into apt's sources."""
    if sw.mirror:
        return {}
    cuda = f"{CUDA_REPO}/{distro}/{repo_arch}/"
    data: dict[str, Any] = {
        "nvidia_driver_repo_url": cuda,
        "nvidia_driver_repo_key_url": cuda + "3bf863cc.pub",
        "container_runtime_toolkit_repo_url": f"{TOOLKIT_REPO}/{arch}/",
        "container_runtime_toolkit_repo_key_url": TOOLKIT_KEY,
    }
    if sw.doca:
        ubuntu = sw.os.replace("ubuntu-", "ubuntu") if sw.os.startswith("ubuntu") else {
            "dgx-os-6": "ubuntu22.04", "dgx-os-7": "ubuntu24.04"}.get(sw.os, sw.os)
        doca_arch = "arm64-sbsa" if arch == "arm64" else "x86_64"
        data |= {"roce_host_repo_url": f"{DOCA_REPO}/{sw.doca}/{ubuntu}/{doca_arch}/",
                 "roce_host_repo_key_url": DOCA_KEY}
    return data


def site_vars(sw: Software) -> dict[str, Any]:
    """Site-wide sources: Kubernetes and Helm apt repositories, charts, CNI, images, NTP."""
    src = sw.sources
    data: dict[str, Any] = {"base_os_ntp_servers": list(src.ntp_servers)}
    if not src.ntp_servers:  # validate warns a mirrored (air-gapped?) site about it
        data["base_os_ntp_pools"] = [DEFAULT_NTP_POOL]
    k8s = sw.kubernetes
    if k8s is None:
        return data
    minor = ".".join(k8s.version.split(".")[:2])
    if not sw.mirror:
        repo = f"{K8S_REPO}/v{minor}/deb/"
        data |= {"kubernetes_repo_url": repo, "kubernetes_repo_key_url": repo + "Release.key",
                 "kubernetes_helm_apt_repo_url": HELM_APT_REPO,
                 "kubernetes_helm_apt_key_url": HELM_APT_KEY}
    data["kubernetes_helm_version"] = HELM_VERSION
    charts = _base(src.helm_repo) if src.helm_repo else None
    data["kubernetes_helm_repo_url"] = charts or NVIDIA_CHARTS
    data["kubernetes_cilium_helm_repo_url"] = charts or CILIUM_CHARTS
    cni_version, _tested = cni_release(k8s.cni, k8s.version)
    data["kubernetes_cni_version"] = cni_version
    data |= {"kubernetes_gpu_operator_chart_version": GPU_OPERATOR_CHART_VERSION,
             "kubernetes_gpu_operator_upgrade_from": list(GPU_OPERATOR_UPGRADE_FROM),
             "kubernetes_network_operator_upgrade_from": list(NETWORK_OPERATOR_UPGRADE_FROM),
             "kubernetes_network_operator_chart_version": NETWORK_OPERATOR_CHART_VERSION,
             "kubernetes_network_operator_component_version":
                 NETWORK_OPERATOR_COMPONENT_VERSION}
    if k8s.cni in CNI_MANIFESTS:
        base, name = CNI_MANIFESTS[k8s.cni]
        url = (f"{_base(src.manifests)}{k8s.cni}/{cni_version}/{name}" if src.manifests
               else base.format(v=cni_version) + name)
        data["kubernetes_cni_manifest_url"] = url
    reg = registry_host(src.registry_mirror) if src.registry_mirror else None
    # hosts.toml's server without a trailing slash: containerd cleans a path "/" to "/"
    # and appends "/v2", pulling from "//v2/..." (remotes/docker/config/hosts.go,
    # parseHostConfig), which a registry need not serve
    data["container_runtime_registry_mirror"] = src.registry_mirror.rstrip("/") \
        if src.registry_mirror else ""
    if version_tuple(k8s.version)[:2] >= CONTAINERD_2_FROM:
        data["container_runtime_containerd_min_version"] = "2.0.0"
    pause = f"{reg}/pause" if reg else PAUSE_IMAGE
    data["container_runtime_sandbox_image"] = f"{pause}:{pause_tag(k8s.version)}"
    data["kubernetes_image_repository"] = reg or ""
    data["kubernetes_network_operator_repository"] = (f"{reg}/nvidia/mellanox" if reg
                                                      else NETWORK_OPERATOR_REPOSITORY)
    data["kubernetes_kube_vip_image"] = (f"{reg}/kube-vip/kube-vip:{KUBE_VIP_VERSION}" if reg
                                         else f"{KUBE_VIP_IMAGE}:{KUBE_VIP_VERSION}")
    return data
