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
import json
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
from provisioner.inventory.loader import LoadedSite
from provisioner.lab.standins import (
    ARCH,
    STANDIN_VERSION,
    SUITE,
    MirrorPlan,
    build_standin,
    plan,
)
from provisioner.payload import KERNEL_HEADERS
from provisioner.profile import lab_kernel_headers

COMPONENTS = ("main", "restricted", "universe", "multiverse")  # base_os_mirror_components
# base_os_mirror_suites' default names the release and its two update pockets, as a site's
# mirror of Ubuntu serves them: the lab serves every package in the release and the pockets
# empty (a snapshot with no update since), each signed as its own suite.
SUITES = (SUITE, f"{SUITE}-updates", f"{SUITE}-security")
DEBIAN_URL = "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
KEY_NAME = "provisioner-lab-mirror.asc"
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

    def stamp(self) -> list[float]:
        """When the Debian index and the lab hosts' package database last changed."""
        lists = [p.stat().st_mtime for p in (self.root / "lists").glob("*_Packages*")]
        return [max(lists, default=0.0), (self.rootfs / "var/lib/dpkg/status").stat().st_mtime]

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
    files = sorted(p for p in dist.rglob("*") if p.is_file() and p.parent != dist)
    lines = ["Origin: provisioner-lab", "Label: provisioner lab mirror", f"Suite: {dist.name}",
             f"Codename: {dist.name}", f"Date: {formatdate(usegmt=True)}",
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


def _stop_agent(home: Path) -> None:
    """gpg starts an agent per GNUPGHOME that outlives it: stop this home's own agent."""
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"],
                   capture_output=True, check=False, timeout=30)


def make_key(home: Path) -> tuple[str, str]:
    """This lab's signing key (private GNUPGHOME): (fingerprint, armored public key). Made
    once per lab; a rebuilt mirror (a node added) is signed with the same key, which the
    hosts already trust."""
    home.mkdir(parents=True, mode=0o700, exist_ok=True)
    try:
        listing = _run([*_gpg(home), "--with-colons", "--list-secret-keys"]) if any(
            home.glob("private-keys-v1.d/*.key")) else ""
        if "fpr:" not in listing:
            _run([*_gpg(home), "--quick-generate-key",
                  "provisioner lab mirror <lab@provisioner.invalid>", "ed25519", "sign", "1y"])
            listing = _run([*_gpg(home), "--with-colons", "--list-secret-keys"])
        fpr = next(ln.split(":")[9] for ln in listing.splitlines() if ln.startswith("fpr:"))
        return fpr, _run([*_gpg(home), "--armor", "--export", fpr])
    finally:
        _stop_agent(home)


def build(wanted: Sequence[tuple[str, str]], out: Path, gnupg_home: Path, cache: Path, rootfs: Path
          ) -> MirrorInfo:
    """Build the signed repository in `out` (dists/, pool/) for the wanted packages.

    The pool and its index are shared by every lab with the same packages (cached, keyed by
    the wanted set, this module's package data and the Debian index); each lab only links
    them in and signs them with its own key."""
    for tool in ("gpg", "dpkg-deb", "dpkg-scanpackages", "apt-get"):
        if shutil.which(tool) is None:
            raise ConfigError(f"lab mirror: {tool} is not installed",
                              hint="apt-get install gnupg dpkg-dev (scripts/bootstrap.sh)")
    started = time.monotonic()
    debian = DebianCache(cache / f"debian-{SUITE}", rootfs)
    debian.update()
    planned = plan(wanted, debian.names())
    # keyed by what goes in (the plan itself, not only what was asked: a change in how the
    # closure is computed must not reuse a pool built the old way)
    ident = json.dumps([sorted(planned.standins.items()),
                        sorted((f"{n}={v}", d) for (n, v), d in planned.standin_depends.items()),
                        sorted(planned.real), STANDIN_VERSION, debian.stamp(), SUITES])
    shared = cache / "repos" / hashlib.sha256(ident.encode()).hexdigest()[:16]
    if not (shared / "counts.json").exists():
        _build_pool(shared, planned, debian, cache / "standins")
    counts = json.loads((shared / "counts.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(shared, out, copy_function=_link_or_copy)
    sign(out, gnupg_home)
    return MirrorInfo(root=out, key_file=out / KEY_NAME, real_debs=counts["real_debs"],
                      standin_debs=counts["standin_debs"], build_s=time.monotonic() - started,
                      packages=counts["packages"])


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _build_pool(shared: Path, p: MirrorPlan, debian: DebianCache,
                standin_cache: Path) -> None:
    """pool/main and its unsigned Packages indexes, for `build` to share."""
    standin_cache.mkdir(parents=True, exist_ok=True)
    tmp = shared.with_name(shared.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    pool = tmp / "pool/main"
    pool.mkdir(parents=True)
    standins = [build_standin(standin_cache, name, v, p.standin_depends[(name, v)])
                for name, versions in sorted(p.standins.items()) for v in versions]
    reals = debian.fetch(p.real)
    for deb in standins:
        _link_or_copy(str(deb), str(pool / (deb.name.rsplit("_", 1)[0] + ".deb")))
    for deb in reals:
        _link_or_copy(str(deb), str(pool / deb.name))
    index(tmp)
    (tmp / "counts.json").write_text(json.dumps(
        {"real_debs": len(reals), "standin_debs": len(standins),
         "packages": sorted(p.standins) + sorted(p.real)}))
    shutil.rmtree(shared, ignore_errors=True)
    tmp.rename(shared)


def publish(out: Path, gnupg_home: Path) -> Path:
    """Index `out`/pool/main and sign it with a new lab key: returns the armored public key
    that apt's signed-by names."""
    index(out)
    return sign(out, gnupg_home)


def index(out: Path) -> None:
    """The Packages indexes of `out`/pool/main: all in the release's main (every component
    present, only main used), the update pockets empty."""
    packages = _scan(out)
    for suite in SUITES:
        for comp in COMPONENTS:
            text = packages if (suite, comp) == (SUITE, "main") else ""
            bdir = out / "dists" / suite / comp / f"binary-{ARCH}"
            bdir.mkdir(parents=True, exist_ok=True)
            (bdir / "Packages").write_text(text)
            with gzip.open(bdir / "Packages.gz", "wt") as fh:
                fh.write(text)


def sign(out: Path, gnupg_home: Path) -> Path:
    """Each suite's Release (hashes of its indexes), signed with a key made for this lab in
    its own GNUPGHOME (InRelease, Release.gpg); the public key beside them."""
    try:
        fpr, public = make_key(gnupg_home)
        for suite in SUITES:
            dist = out / "dists" / suite
            (dist / "Release").write_text(_release(dist))
            _run([*_gpg(gnupg_home), "--local-user", fpr, "--clearsign", "--digest-algo",
                  "SHA256", "--yes", "--output", str(dist / "InRelease"),
                  str(dist / "Release")])
            _run([*_gpg(gnupg_home), "--local-user", fpr, "--armor", "--detach-sign",
                  "--digest-algo", "SHA256", "--yes", "--output", str(dist / "Release.gpg"),
                  str(dist / "Release")])
    finally:
        _stop_agent(gnupg_home)
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


def wanted(*artifact_lists: Sequence[dict[str, str]], release: str | None = None
           ) -> list[tuple[str, str]]:
    """(package name, pinned upstream version or "") pairs, from what `render.artifacts`
    says the rendered roles install; one list per software set (the site, each bundle).
    The running kernel's headers are those of `release` (the machine's: the lab hosts run
    it), left out where it cannot name a package (the lab then skips them by tag)."""
    headers = lab_kernel_headers(release)
    out = {(item["name"], item["version"]) for artifacts in artifact_lists
           for item in artifacts if item["kind"] == "package"}
    if headers and any(item["kind"] == "kernel-package" and item["name"] == KERNEL_HEADERS
                       for artifacts in artifact_lists for item in artifacts):
        out.add((headers, ""))
    return sorted(out)


def wanted_for(loaded: LoadedSite) -> list[tuple[str, str]]:
    """Everything the site installs now and at each of its release bundles
    (bundles/NAME.yaml), so that `upgrade apply` in the lab finds the new versions too,
    as a site mirrors a release before rolling it out."""
    from provisioner import render
    from provisioner.inventory.bundle_models import available, load_bundle
    from provisioner.upgrade.plan import site_at

    lists = [render.artifacts(loaded)]
    for name in available(loaded.base_dir):
        lists.append(render.artifacts(site_at(loaded, load_bundle(loaded.base_dir,
                                                                  name).bundle)))
    return wanted(*lists)


def build_lab(loaded: LoadedSite, lab: Path, cache: Path, rootfs: Path) -> MirrorInfo:
    """The lab's mirror (`lab up`, and again when `add` grows the site): everything the site
    and its bundles install, in the lab's directory, signed with the lab's one key."""
    return build(wanted_for(loaded), lab / "mirror/repo", lab / "mirror/gnupg",
                 cache / "mirror", rootfs)
