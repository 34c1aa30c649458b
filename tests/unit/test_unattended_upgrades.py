"""base_os keeps unattended-upgrades off the kernel and the GPU and cluster stack: the file
it writes, read by the real apt-config beside Ubuntu's own 50unattended-upgrades."""

from __future__ import annotations

import re
import subprocess

import yaml

from tests.conftest import ROOT, role_task, role_template


def test_apt_reads_the_blacklist_beside_ubuntus_own(tmp_path):
    defaults = yaml.safe_load((ROOT / "roles/base_os/defaults/main.yml").read_text())
    parts = tmp_path / "apt.conf.d"
    parts.mkdir()
    # Ubuntu's own file declares the list (empty but for a site's entries)
    (parts / "50unattended-upgrades").write_text(
        'Unattended-Upgrade::Package-Blacklist {\n    "site-package";\n};\n')
    (parts / "51provisioner-unattended-upgrades").write_text(role_template(
        "base_os", "unattended-upgrades.conf.j2",
        base_os_unattended_blacklist=defaults["base_os_unattended_blacklist"]))
    main = tmp_path / "apt.conf"
    main.write_text(f'Dir::Etc::Parts "{parts}";\nDir::Etc::main "/dev/null";\n')
    dumped = subprocess.run(["apt-config", "dump"], env={"APT_CONFIG": str(main)},
                            capture_output=True, text=True, check=True).stdout
    listed = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "([^"]*)";$', dumped,
                        re.MULTILINE)
    assert listed == ["site-package", *defaults["base_os_unattended_blacklist"]]
    # unattended-upgrades matches each from the start of a package name (re.match)
    stack = ["linux-image-6.8.0-60-generic", "linux-modules-nvidia-570-server-open-generic",
             "nvidia-driver-570-open", "libnvidia-nscq-570", "cuda-toolkit-12-8",
             "datacenter-gpu-manager-4-cuda12", "doca-ofed", "containerd", "runc", "kubelet"]
    assert all(any(re.match(p, pkg) for p in listed) for pkg in stack)
    assert not any(re.match(p, "openssl") for p in listed)  # the OS keeps its updates
    task = role_task("base_os", "Keep unattended upgrades off the kernel and the GPU and "
                     "cluster stack")
    assert task["ansible.builtin.template"]["dest"] == \
        "/etc/apt/apt.conf.d/51provisioner-unattended-upgrades"
