"""`render --artifacts`: every package, chart, image and file the rendered roles fetch, for
an offline mirror. NVIDIA package names come from payload.py (the same data render writes
into the host variables) and the sources and versions from sources.py."""

from __future__ import annotations

from provisioner import hostnet, sources
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Role
from provisioner.inventory.topology import HostPlan, has_roce, host_plans
from provisioner.payload import KERNEL_HEADERS, payload_for

# A chart's and a manifest's images are the chart's own data, at its pinned version: the
# list names where to read them rather than keeping a copy that would drift.
_CHART_IMAGES = ("the images the {} chart deploys (`helm show values`: each component's "
                 "repository, image and version)")


def artifacts(loaded: LoadedSite) -> list[dict[str, str]]:
    """Every package, chart, image and file the rendered roles fetch, for an offline mirror."""
    sw = loaded.site.software
    hosts = host_plans(loaded)
    servers = [h for h in hosts if h.is_server]
    gpu = [h for h in servers if h.block.gpu is not None]
    items: list[dict[str, str]] = []

    def add(kind: str, name: str, version: str, role: str, for_hosts: list[HostPlan]) -> None:
        names = sorted({h.node.hostname for h in for_hosts})
        if names:
            items.append({"kind": kind, "name": name, "version": version, "role": role,
                          "hosts": ",".join(names)})

    add("package", "chrony", "", "base_os", servers)
    add("package", "python3-debian", "", "base_os", servers)  # deb822_repository's import
    add("package", "netplan.io", "", "host_network",
        [h for h in servers if hostnet.plan(loaded.site, h.node)])
    drv = sw.nvidia_driver
    # Every NVIDIA package name comes from payload.py, the data the roles install from.
    payloads = {h.node.hostname: p for h in gpu if (p := payload_for(loaded, h)) is not None}
    if payloads:
        add("repository", "NVIDIA CUDA repository (developer.download.nvidia.com/compute/cuda)",
            sw.os, "nvidia_driver", [h for h in gpu if h.node.hostname in payloads])
    pin_version = drv.version or "" if drv else ""
    by_name: dict[tuple[str, str], list[HostPlan]] = {}
    for h in gpu:
        p = payloads.get(h.node.hostname)
        if p is None:
            continue
        for role, names in p.by_role().items():
            for name in names:
                by_name.setdefault((role, name), []).append(h)
    for (role, name), users in sorted(by_name.items(), key=lambda kv: kv[0][1]):
        p = payloads[users[0].node.hostname]
        if name in p.pinned_at_driver:
            version = pin_version
        elif role == "cuda_toolkit":
            version = sw.cuda or ""
        elif role == "dcgm":
            version = sw.dcgm.version or ""
        else:
            version = ""
        add("package", name, version, role, users)
    # named after each node's running kernel: a kind of its own, so that a script feeding
    # the "package" names to apt-get download never meets the placeholder
    add("kernel-package", KERNEL_HEADERS, "", "nvidia_driver",
        [h for h in gpu if (p := payloads.get(h.node.hostname)) and p.builds_with_dkms])
    roce = [h for h in servers if has_roce(loaded, h.node)]
    if sw.doca:  # roce_host installs DOCA only when the site pins it
        add("repository", "DOCA repository (linux.mellanox.com/public/repo/doca)", sw.doca,
            "roce_host", roce)
        add("kernel-package", KERNEL_HEADERS, "", "roce_host", roce)  # DOCA builds with DKMS
        add("package", "doca-ofed", sw.doca, "roce_host", roce)
    k8s = [h for h in servers if {Role.CONTROL_PLANE, Role.WORKER} & set(h.roles)]
    if sw.kubernetes and k8s:
        add("package", "containerd", "", "container_runtime", k8s)
        add("repository", "NVIDIA Container Toolkit repository (nvidia.github.io/"
            "libnvidia-container)", "stable", "container_runtime",
            [h for h in k8s if h.block.gpu is not None])
        minor = ".".join(sw.kubernetes.version.split(".")[:2])
        add("repository", f"Kubernetes repository (pkgs.k8s.io/core:/stable:/v{minor})", minor,
            "kubernetes", k8s)
        # one release's four packages, at its version (roles/container_runtime/defaults)
        for pkg in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container-tools", "libnvidia-container1"):
            add("package", pkg, sw.container_toolkit or "", "container_runtime",
                [h for h in k8s if h.block.gpu is not None])
        for pkg in ("kubeadm", "kubelet", "kubectl"):
            add("package", pkg, sw.kubernetes.version, "kubernetes", k8s)
        add("image", sources.PAUSE_IMAGE, sources.pause_tag(sw.kubernetes.version),
            "container_runtime", k8s)
        add("image-set", "kubeadm control-plane images (kubeadm config images list)",
            f"v{sw.kubernetes.version}", "kubernetes", k8s)
        cni = sw.kubernetes.cni
        cni_version, _tested = sources.cni_release(cni, sw.kubernetes.version)
        if cni in sources.CNI_MANIFESTS:
            add("file", f"{cni} CNI manifest ({sources.CNI_MANIFESTS[cni][1]})",
                cni_version, "kubernetes", k8s)
            add("image-set", f"the images the {cni} manifest names (its image: lines)",
                cni_version, "kubernetes", k8s)
        if cni == "cilium":
            add("helm-chart", "cilium/cilium", cni_version, "kubernetes", k8s)
            add("image-set", _CHART_IMAGES.format("cilium/cilium"), cni_version,
                "kubernetes", k8s)
        control = [h for h in k8s if Role.CONTROL_PLANE in h.roles]
        if gpu or roce or cni == "cilium":  # helm runs on the first control plane only
            add("package", "helm", sources.HELM_VERSION, "kubernetes", control[:1])
        if sw.kubernetes.vip is not None:
            add("image", sources.KUBE_VIP_IMAGE, sources.KUBE_VIP_VERSION, "kubernetes",
                control)
        if gpu:
            add("helm-chart", "nvidia/gpu-operator", sources.GPU_OPERATOR_CHART_VERSION,
                "kubernetes", k8s)
            add("image-set", _CHART_IMAGES.format("nvidia/gpu-operator"),
                sources.GPU_OPERATOR_CHART_VERSION, "kubernetes", k8s)
        if roce:
            add("helm-chart", "nvidia/network-operator", sources.NETWORK_OPERATOR_CHART_VERSION,
                "kubernetes", k8s)
            add("image-set", _CHART_IMAGES.format("nvidia/network-operator"),
                sources.NETWORK_OPERATOR_CHART_VERSION, "kubernetes", k8s)
            add("image-set", f"{sources.NETWORK_OPERATOR_REPOSITORY} (rdma shared device plugin,"
                " multus, CNI plugins, nv-ipam)", sources.NETWORK_OPERATOR_COMPONENT_VERSION,
                "kubernetes", k8s)
    return items
