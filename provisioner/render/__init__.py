"""Site -> a self-contained Ansible project (an ansible-runner private data directory).

Output is deterministic (same site, byte-identical files: sorted keys, sorted walks) and
secret-free: credentials appear only as references. Every value that reaches a shell, a
config file or a switch CLI was validated by the inventory models (RFC 1123 host names,
interface names, versions) and is checked again here before it is written.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from provisioner import __version__, hostnet, outdir, resources, sources
from provisioner import payload as payload_mod
from provisioner import roce as roce_mod
from provisioner.errors import RenderError
from provisioner.inventory.kube_checks import node_taints
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import NetworkKind, Role
from provisioner.inventory.topology import (
    HostPlan,
    ansible_host,
    group_name,
    groups,
    has_roce,
    host_plans,
    nvlink_domain,
)
from provisioner.payload import kernel_modules_for, payload_for
from provisioner.profile import for_site
from provisioner.state.dir import location

__all__ = ["HostPlan", "Rendered", "ansible_host", "artifacts", "group_name", "host_plans",
           "kernel_modules_for", "render"]

RENDER_MARKER = outdir.MARKER  # a directory holding it is a former render
SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:/@+=, -]*$")


def _dump(data: Any) -> str:
    return "---\n" + yaml.safe_dump(data, sort_keys=True, default_flow_style=False,
                                    width=4096, allow_unicode=True)


@dataclass
class Rendered:
    out: Path
    files: list[Path] = field(default_factory=list)
    groups: dict[str, list[str]] = field(default_factory=dict)


MIRROR_KEY_NAME = "site-mirror-key"  # in the rendered project's files/ (+ the key's suffix)
CA_NAME = "site-ca.crt"  # the site's CA certificate, in the rendered project's files/


def _site_files(loaded: LoadedSite) -> dict[str, tuple[str, Path]]:
    """The site's public files the project carries in files/ (a job sent to an execution
    node carries them too), by setting: their name there and their source on the
    controller (relative to the site). The mirror's key keeps its suffix (.asc or .gpg)."""
    sw, base = loaded.site.software, loaded.base_dir.resolve()
    out: dict[str, tuple[str, Path]] = {}
    if sw.mirror_key:
        key = base / sw.mirror_key
        out["mirror_key"] = (MIRROR_KEY_NAME + _key_suffix(key), key)
    if sw.ca_certificate:
        out["ca_certificate"] = (CA_NAME, base / sw.ca_certificate)
    return out


def _key_suffix(path: Path) -> str:
    """The suffix apt reads a signed-by keyring by, from what the file holds: .asc armored,
    .gpg binary; a key saved under the other name is ignored ("unsupported filetype") and
    apt fails on the mirror. A secret key would go to every node: refused."""
    if not path.is_file():
        return path.suffix  # _group_vars says it is not a file
    data = path.read_bytes()[:1_000_000]
    head = data[:64]
    if b"-----BEGIN PGP PRIVATE KEY BLOCK-----" in data:
        raise RenderError(f"software.mirror_key: {path} holds a secret key, which would be "
                          "copied to every node", hint="export the mirror's public key alone: "
                          "gpg --export KEYID > mirror.gpg, or gpg --armor --export KEYID > "
                          "mirror.asc")
    if b"-----BEGIN PGP PUBLIC KEY BLOCK-----" in data:  # text may come before it
        return ".asc"
    # an OpenPGP packet header (RFC 4880 4.2): old format tag in bits 5-2, new in bits 5-0;
    # a public key is tag 6 (gpg --export starts with 0x99)
    tag = -1 if not head or not head[0] & 0x80 else (
        head[0] & 0x3F if head[0] & 0x40 else (head[0] >> 2) & 0x0F)
    if tag == 6:
        return ".gpg"
    raise RenderError(f"software.mirror_key: {path} is no OpenPGP public key"
                      + (" (it holds a secret key, which would be copied to every node)"
                         if tag in (5, 7) else ""),
                      hint="export the mirror's signing key: gpg --export KEYID > mirror.gpg, "
                           "or gpg --armor --export KEYID > mirror.asc (not a keybox, "
                           "pubring.kbx)")


def _check_ca(path: Path) -> None:
    """The CA goes to every node, readable by all: a certificate, never a private key."""
    text = path.read_bytes()[:1_000_000].decode("ascii", "replace")
    if "PRIVATE KEY-----" in text:
        raise RenderError(f"software.ca_certificate: {path} holds a private key, which "
                          "would be copied to every node", hint="give the CA's certificate "
                          "alone (PEM, -----BEGIN CERTIFICATE-----)")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise RenderError(f"software.ca_certificate: {path} is no PEM certificate",
                          hint="give the CA's certificate in PEM (-----BEGIN CERTIFICATE-----)")


def _group_vars(loaded: LoadedSite) -> dict[str, Any]:
    site, sw = loaded.site, loaded.site.software
    files = _site_files(loaded)
    for setting, (_name, path) in files.items():
        if not path.is_file():
            raise RenderError(f"software.{setting}: {path} is not a file")
    if "ca_certificate" in files:
        _check_ca(files["ca_certificate"][1])
    named = {setting: name for setting, (name, _path) in files.items()}
    drv = sw.nvidia_driver
    roce = sw.roce
    data: dict[str, Any] = {
        "provisioner_site": site.site.name,
        "provisioner_os": sw.os,
        "provisioner_networks": {n.name: {"cidr": str(n.cidr), "kind": n.kind.value,
                                          "mtu": n.mtu, "vlan": n.vlan}
                                 for n in site.networks},
        "provisioner_mirror": sw.mirror or "",
        "base_os_mirror": sw.mirror or "",
        "base_os_mirror_arm64": sw.mirror_arm64 or "",
        **({"base_os_mirror_suites": list(sw.mirror_suites)} if sw.mirror_suites else {}),
        # the key travels inside the project (project/files/), so a job sent to an
        # execution node carries it too; the role copies it and names it in signed-by
        "base_os_mirror_key": named.get("mirror_key", ""),
        "base_os_ca_certificate": named.get("ca_certificate", ""),
        # containerd reads hosts.toml's `ca` at each pull; its system store once, at start
        "container_runtime_ca_certificate": named.get("ca_certificate", ""),
        "container_runtime_toolkit_version": sw.container_toolkit or "",
        "dcgm_diag_level": sw.dcgm.diag_level,
        "roce_host_interfaces": list(roce.interfaces),
        # the same contract renders the switch side (provisioner/roce.py, fabric/)
        **roce_mod.host_vars(roce_mod.policy(roce)),
        "roce_host_doca_version": sw.doca or "",
        "ansible_user": site.site.ssh.user,
        "ansible_port": site.site.ssh.port,
    }
    if site.site.ssh.private_key_file:
        data["ansible_ssh_private_key_file"] = site.site.ssh.private_key_file
    if drv is not None:
        data |= {"nvidia_driver_branch": drv.branch,
                 "nvidia_driver_version": drv.version or ""}
    if drv is not None and any(h.block.nvswitch or h.block.imex for h in host_plans(loaded)):
        # only where a node runs fabric manager or IMEX (a DGX-1 runs neither)
        fm_version = sw.fabric_manager.version or drv.version or ""
        data |= {"fabric_manager_version": fm_version,
                 "fabric_manager_enabled": sw.fabric_manager.enabled is not False}
    if sw.cuda:
        # The role's own table (roles/cuda_toolkit/vars) decides the minimum driver, by
        # compat.cuda_min_driver's rule, so a project run by hand is checked too.
        data["cuda_toolkit_version"] = sw.cuda
    if sw.kubernetes:
        k = sw.kubernetes
        data |= {"kubernetes_version": k.version, "kubernetes_cni": k.cni,
                 "kubernetes_pod_cidr": str(k.pod_cidr),
                 "kubernetes_service_cidr": str(k.service_cidr)}
    data |= sources.site_vars(sw)
    data |= _kubernetes_vars(loaded)
    for key, value in data.items():
        if isinstance(value, str) and not SAFE_VALUE_RE.match(value):
            raise RenderError(f"refusing to render {key}={value!r}: unexpected characters")
    return data


def _host_vars(loaded: LoadedSite, h: HostPlan) -> dict[str, Any]:
    block, node = h.block, h.node
    mgmt = ansible_host(node)
    kinds = {n.name: n.kind for n in loaded.site.networks}
    gpu = block.gpu
    labels = {
        "provisioner.io/block": block.name,
        "provisioner.io/rack": h.placement.rack,
        # nvidia.com/gpu.product belongs to GPU Feature Discovery, which writes the full
        # product name (NVIDIA-H100-80GB-HBM3): our own key, or each `up` would flip it back
        **({"provisioner.io/gpu-model": gpu.model,
            "provisioner.io/gpu-arch": gpu.architecture.value}
           if gpu else {}),
        **({"provisioner.io/nvswitch": "true"} if block.nvswitch else {}),
        **({"provisioner.io/roce": "true"} if has_roce(loaded, node) else {}),
        **node.labels,
    }
    data: dict[str, Any] = {
        "provisioner_block": block.name,
        "provisioner_block_kind": block.kind.value,
        "provisioner_rack": h.placement.rack,
        "provisioner_rack_u": h.placement.u,
        "provisioner_roles": [r.value for r in h.roles],
        "provisioner_addresses": {k: str(v) for k, v in sorted(node.addresses.items())},
        "provisioner_macs": dict(sorted(node.macs.items())),
        # the host QoS goes to these ports only, where the site names no interfaces
        "roce_host_macs": sorted(mac for net, mac in node.macs.items()
                                 if kinds.get(net) is NetworkKind.ROCE),
        "provisioner_gpu_model": gpu.model if gpu else "",
        "provisioner_gpu_count": gpu.count if gpu else 0,
        "provisioner_gpu_arch": gpu.architecture.value if gpu else "",
        "provisioner_nvswitch": block.nvswitch,
        "provisioner_imex": block.imex,
        "provisioner_node_labels": labels,
        "provisioner_node_taints": node_taints(block, h.roles),
    }
    if gpu is not None:
        data["nvidia_driver_kernel_modules"] = kernel_modules_for(loaded, block)
        data |= _payload_vars(loaded, h)
    if h.is_server:
        # every data network's NIC, address, MTU, VLAN and rail table (hostnet.py)
        data["host_network_interfaces"] = [i.to_vars() for i in hostnet.plan(loaded.site, node)]
        sw = loaded.site.software
        p = payload_for(loaded, h)
        data |= sources.host_repo_vars(sw, p.arch if p else "amd64",
                                       p.repo_arch if p else "x86_64",
                                       payload_mod.cuda_repo_distro(sw.os))
    if mgmt is not None:
        data["ansible_host"] = mgmt
    return data


def _kubernetes_vars(loaded: LoadedSite) -> dict[str, Any]:
    """The stable API endpoint: the VIP (kube-vip), the site's load balancer, or else the
    first control plane (a single control plane only; validate warns for HA without one)."""
    k = loaded.site.software.kubernetes
    if k is None:
        return {}
    cps = [h for h in host_plans(loaded) if Role.CONTROL_PLANE in h.roles]
    first = ansible_host(cps[0].node) if cps else None
    if k.vip is not None:
        endpoint = f"{k.vip}:6443"
    elif k.load_balancer:
        endpoint = k.load_balancer if ":" in k.load_balancer else f"{k.load_balancer}:6443"
    else:
        endpoint = f"{first}:6443" if first else ""
    # flannel takes the NIC of the default route unless told (flannel's --iface-can-reach:
    # "the interface to use of command 'ip route get <ip-address>'"): the management
    # network's own address routes to its NIC on every node and belongs to none (validate
    # refuses a node on it), where the VIP would route to `lo` on the node holding it.
    mgmt = next((n for n in loaded.site.networks if n.kind is NetworkKind.MANAGEMENT), None)
    return {"kubernetes_control_plane_endpoint": endpoint,
            "kubernetes_vip": str(k.vip) if k.vip is not None else "",
            "kubernetes_flannel_iface_can_reach":
                str(mgmt.cidr.network_address) if mgmt is not None else ""}


def imex_peers(loaded: LoadedSite, h: HostPlan) -> list[str]:
    """Management addresses of the IMEX nodes in h's NVLink domain (default: its rack)."""
    domain = nvlink_domain(h.placement)
    peers = [ansible_host(o.node) for o in host_plans(loaded)
             if o.block.imex and nvlink_domain(o.placement) == domain]
    return [p for p in peers if p is not None]


def _payload_vars(loaded: LoadedSite, h: HostPlan) -> dict[str, Any]:
    """The package lists the roles install: written here, never computed in a role."""
    p = payload_for(loaded, h)
    if p is None:
        return {}
    sw = loaded.site.software
    data: dict[str, Any] = {
        "provisioner_apt_arch": p.arch,
        "provisioner_repo_arch": p.repo_arch,
        "nvidia_driver_source": p.source,
        "nvidia_driver_packages": list(p.driver),
        "nvidia_driver_pinning_packages": list(p.pinning),
        "nvidia_driver_pinned_packages": list(p.pinned_at_driver),
        "fabric_manager_packages": list(p.fabric),
        "fabric_manager_service": p.fabric_service,
        "dcgm_packages": list(p.dcgm),
        "cuda_toolkit_packages": list(p.cuda),
        # the same packages as apt installs them: at the pinned versions
        "nvidia_driver_package_specs": p.apt_specs(p.driver, sw),
        "fabric_manager_package_specs": p.apt_specs(p.fabric, sw),
        "dcgm_package_specs": p.apt_specs(p.dcgm, sw),
        "dcgm_pin_version": (f"{payload_mod.DCGM_APT_EPOCH}{sw.dcgm.version}-*"
                             if sw.dcgm.version else ""),
        "cuda_toolkit_package_specs": p.apt_specs(p.cuda, sw),
        "cuda_toolkit_repo_distro": payload_mod.cuda_repo_distro(sw.os),
    }
    if p.kernel_flavour:  # source canonical: the flavour its modules are for
        data["nvidia_driver_modules_flavour"] = p.kernel_flavour
    if h.block.imex:
        data["fabric_manager_imex_peers"] = imex_peers(loaded, h)
    return data


def _hosts_yml(groups_: dict[str, list[str]], hostvars: dict[str, dict[str, Any]]
               ) -> dict[str, Any]:
    def hosts(members: list[str]) -> dict[str, Any]:
        return {"hosts": {h: None for h in members}} if members else {}

    children: dict[str, Any] = {
        g: hosts(members)
        for g, members in groups_.items() if g not in ("kube_control_plane", "kube_node")
    }
    children["k8s_cluster"] = {"children": {g: hosts(groups_[g])
                                            for g in ("kube_control_plane", "kube_node")}}
    return {"all": {"hosts": {h: {"ansible_host": v["ansible_host"]} if "ansible_host" in v
                              else None for h, v in sorted(hostvars.items())},
                    "children": children}}


def _copy_tree(src: Path, dst: Path, written: list[Path]) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        # role test scenarios (molecule/) are not part of what runs on a site
        if any(part.startswith(".") or part in ("__pycache__", "molecule") for part in rel.parts):
            continue
        target = dst / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            written.append(target)


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(resources.templates_dir()),
                              undefined=jinja2.StrictUndefined, autoescape=False,  # noqa: S701 - not HTML
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def render(loaded: LoadedSite, out: Path, *, lab: bool = False) -> Rendered:
    """Write the private data dir. `out` is replaced (it must be empty or a former render).
    For the lab, ansible.cfg skips the tasks a lab host cannot do (profile.lab_skip_tags).

    The project is written beside `out` and renamed onto it at the end: a render refused
    half-way (a bad CA file, a value it will not write) leaves no partial directory, and a
    former render stays as it was."""
    rendered = outdir.replace(out, lambda work: _render_into(loaded, work, lab))
    return Rendered(out=out, files=[out / p.relative_to(rendered.out) for p in rendered.files],
                    groups=rendered.groups)


def _render_into(loaded: LoadedSite, out: Path, lab: bool) -> Rendered:
    result = Rendered(out=out)
    written = result.files

    def write(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    hosts = host_plans(loaded)
    servers = [h for h in hosts if h.is_server]
    hostvars = {h.node.hostname: _host_vars(loaded, h) for h in hosts}
    groups_ = groups(loaded, hosts)
    result.groups = groups_
    write(RENDER_MARKER, f"rendered by provisioner {__version__}\n")
    write("inventory/hosts.yml", _dump(_hosts_yml(groups_, hostvars)))
    write("inventory/group_vars/all.yml", _dump(_group_vars(loaded)))
    for name, hv in sorted(hostvars.items()):
        write(f"inventory/host_vars/{name}.yml", _dump(hv))
    env = _env()
    context = {"site": loaded.site.site.name, "version": __version__, "lab": lab,
               "skip_tags": for_site(loaded, lab=lab).skip_tags,
               "servers": len(servers), "groups": groups_,
               # the host keys `pxe render` generated into the nodes' autoinstall data
               "known_hosts": (location(loaded.base_dir) / "known_hosts").resolve(),
               # every lab uses the same addresses: a lab's own SSH multiplexing sockets, so
               # that a connection kept open (ControlPersist) never reaches another lab's host
               "control_tag": hashlib.sha1(  # noqa: S324 - a name, not security
                   str(loaded.base_dir.resolve()).encode()).hexdigest()[:8]}
    write("project/ansible.cfg", env.get_template("ansible.cfg.j2").render(**context))
    write("README.md", env.get_template("render-readme.md.j2").render(**context))
    write("env/settings", _dump({"idle_timeout": 1800}))
    _copy_tree(resources.playbooks_dir(), out / "project", written)
    _copy_tree(resources.roles_dir(), out / "project" / "roles", written)
    for name, src in _site_files(loaded).values():  # checked by _group_vars; public, no secret
        dest = out / "project" / "files" / name
        dest.parent.mkdir(exist_ok=True)
        shutil.copyfile(src, dest)
        written.append(dest)
    return result


from provisioner.render.artifacts import artifacts  # noqa: E402 - re-export
