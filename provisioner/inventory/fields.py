"""Field types for inventory values that reach a command line, a URL or a rendered file.

Audit of the models' free-text fields (what each one reaches, and why it is safe):

  checked here (a pattern, refused at load with file:line and key):
    Node.labels            kubelet --node-labels / kubeadm config: Kubernetes label syntax
    Kubernetes.version     kubeadm, apt pins and package names: x.y.z only
    Gpus.model             the provisioner.io/gpu-model label value and group names
    Software.mirror, mirror_arm64, sources.manifests
                           a line of apt's sources.list, a get_url base: an http(s) or
                           file URL (MirrorUrl: no spaces, no login, its host a Host)
    sources.registry_mirror, sources.helm_repo, Provisioning.iso_url
                           containerd's mirror endpoint, helm's repository, the URL a BMC
                           fetches: http(s) only (HttpUrl), no login, its host a Host
    Software.mirror_suites the suite field of those lines: a Debian suite name, no spaces
    Ssh.private_key_file   ansible_ssh_private_key_file (ssh -i): a plain path
    Software.mirror_key    the source of the role's key copy: a plain path
    Software.ca_certificate  the source of the role's CA copy: a plain path (render also
                           refuses a file that is no certificate, or holds a private key)
    Bmc.address, SwitchAccess.address, ExecutionNode.address, sources.ntp_servers
                           what a connection is opened to (Redfish URL, pyghmi, netmiko,
                           ssh, chrony.conf): one Host type, an IPv4 or IPv6 literal or an
                           RFC 1123 host name, nothing else (no "user:password@", no "/",
                           no shell characters, nothing starting with "-")
    Kubernetes.load_balancer  the API endpoint kubeadm and the kubeconfigs name: HostPort,
                           a Host with an optional :port
    Bmc.system_id          a path segment of the Redfish URL: no "/" and no ".."
    Credentials.username   sent to the BMC or switch: no control characters
  checked by the general types below (host and other names, RFC 1123; MACs; addresses
    and CIDRs, typed) or in the models: versions and interface names
    (software_models.py), ssh.user, enums.
  safe without a pattern (never rendered, never on a command line): BlockType.description,
    estimated, sources, Nic.model, Feed.name, SiteMeta.description (reports only; the
    console escapes markup); SecretRef.file/vault and Tls.ca_bundle (paths the tool itself
    opens; rendered files carry references, never secrets or their paths' contents).
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_address
from socket import AF_INET, inet_ntop, inet_pton
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_NAME_RE = re.compile(rf"^{_LABEL_NAME}$")
# RFC 1123 subdomain: lower-case labels joined by dots.
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
KUBE_VERSION_RE = re.compile(r"^\d{1,4}\.\d{1,4}\.\d{1,4}$")
PATH_RE = r"^[A-Za-z0-9_.,/~+@=:-]{1,4096}$"
# Spelled for both Python and ECMA-262 (JSON Schema): no escaped quote in the classes.
MIRROR_RE = "^(https?://[^\\s'\"\\\\<>{}|^`]+|file:///[^\\s'\"\\\\<>{}|^`]*)$"
# a suite (distribution) of a sources.list line: jammy, jammy-updates, noble-security
SUITE_RE = r"^[a-z0-9][a-z0-9.+-]{0,63}$"
SYSTEM_ID_RE = r"^[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}$"  # no "/", and not "." or ".."
NO_CONTROL_RE = r"^[^\x00-\x1f\x7f]+$"
# One OpenSSH public key line (type, base64, optional plain comment): it is rendered into
# autoinstall data and authorized_keys, so nothing else may ride along.
PUBLIC_KEY_RE = (r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]{16,}={0,3}"
                 r"( [\w.@+-]{1,128})?$")


def _label_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN_RE.match(prefix)):
        raise ValueError(f"label key {key!r}: the prefix before '/' must be a DNS subdomain "
                         "(lower-case letters, digits, '-' and '.', at most 253)")
    if len(name) > 63 or not LABEL_NAME_RE.match(name):
        raise ValueError(f"label key {key!r}: the name must be 1-63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit")
    return key


def _label_value(value: str) -> str:
    if value and (len(value) > 63 or not LABEL_NAME_RE.match(value)):
        raise ValueError(f"label value {value!r}: use at most 63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit (or leave it empty)")
    return value


def _text(value: Any) -> Any:
    """Label values are text: YAML's true or 1 would reach Kubernetes as "True" or "1"."""
    if not isinstance(value, str):
        raise ValueError("write the label value in quotes, as text")
    return value


def _kube_version(value: str) -> str:
    if not KUBE_VERSION_RE.match(value):
        raise ValueError(f"not a Kubernetes version: {value!r}; write x.y.z, such as 1.31.4")
    return value


def _kube_version_in(value: Any) -> Any:
    if isinstance(value, float):
        raise ValueError(f"not a Kubernetes version: {value}; write x.y.z in quotes")
    return value


def _no_login(url: str) -> str:
    """A login in a URL would be rendered into group_vars, apt sources and helm's argv."""
    if "@" in url.split("://", 1)[-1].split("/", 1)[0]:
        raise ValueError("the URL carries a login (user@ or user:password@), which would be "
                         "written into the rendered files and logs: give the URL without it "
                         "(apt reads a mirror's login from /etc/apt/auth.conf.d, see "
                         "apt_auth.conf(5))")
    return url


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, BeforeValidator(_text), AfterValidator(_label_value)]
KubeVersion = Annotated[str, BeforeValidator(_kube_version_in), AfterValidator(_kube_version)]
GpuModel = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_NAME_RE.pattern)]
LocalPath = Annotated[str, Field(pattern=PATH_RE)]
Suite = Annotated[str, Field(pattern=SUITE_RE)]
PublicKey = Annotated[str, Field(max_length=16_384, pattern=PUBLIC_KEY_RE)]
SystemId = Annotated[str, Field(pattern=SYSTEM_ID_RE)]
UserName = Annotated[str, Field(min_length=1, max_length=64, pattern=NO_CONTROL_RE)]


# ---------------------------------------------------------------- names, MACs, addresses
# Shared by models.py, block_models.py and software_models.py: here, not in one of them.

# RFC 1123 host label: letters, digits, hyphen; 1-63 chars; no leading/trailing hyphen.
# Lower case only: Kubernetes node names must be lower case (RFC 1123 subdomain).
HOSTNAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def _hostname(value: str) -> str:
    if not HOSTNAME_RE.match(value):
        raise ValueError(
            "not a valid RFC 1123 host name: use 1-63 lower-case letters, digits or '-', "
            "not starting or ending with '-'"
        )
    return value


def _name(value: str) -> str:
    if not NAME_RE.match(value):
        raise ValueError(
            "not a valid name: use 1-63 lower-case letters, digits, '-' or '_', "
            "starting and ending with a letter or digit"
        )
    return value


def _mac(value: str) -> str:
    norm = value.strip().lower().replace("-", ":")
    if not MAC_RE.match(norm):
        raise ValueError("not a MAC address: write six hex pairs such as 52:54:00:12:34:56")
    return norm


def _text_only(value: Any) -> Any:
    """Addresses are written as text: YAML's true or 42 must not become 0.0.0.1/32."""
    if not isinstance(value, str):
        raise ValueError("write the address as text, for example 10.0.0.1 or 10.0.0.0/24")
    return value


def parse_ipv4(text: str) -> IPv4Address | None:
    """`text` as an IPv4 address when it is one in canonical dotted-quad form, else None
    (the caller falls back to ipaddress, for IPv6 or its error message). inet_pton and
    inet_ntop are C calls: a fifth of ipaddress's parse, felt by a site of 100,000 nodes
    with three addresses each (bench/inventory_scale.py); the round trip to the same text
    means ipaddress would read it alike."""
    try:
        packed = inet_pton(AF_INET, text)
    except (OSError, ValueError, TypeError, UnicodeError):
        return None
    return IPv4Address(packed) if inet_ntop(AF_INET, packed) == text else None


def ip_or_none(text: str) -> IPv4Address | IPv6Address | None:
    """`text` as an IP address, or None where it is a host name: IPv4 on the fast path."""
    fast = parse_ipv4(text)
    if fast is not None:
        return fast
    try:
        return ip_address(text)
    except ValueError:
        return None


def _ipv4_text(value: Any) -> Any:
    """Text only (see _text_only); the common case parsed fast (parse_ipv4), the rest
    left to pydantic's own IPv4 validator and its message."""
    return parse_ipv4(_text_only(value)) or value


# WithJsonSchema only tells editors (JSON Schema export) what the validators accept; the
# validators above stay the one check, with their own messages.
IPv4Addr = Annotated[IPv4Address, BeforeValidator(_ipv4_text)]
IPv4Net = Annotated[IPv4Network, BeforeValidator(_text_only)]
Hostname = Annotated[str, AfterValidator(_hostname), WithJsonSchema(
    {"type": "string", "pattern": HOSTNAME_RE.pattern,
     "description": "RFC 1123 host label: lower-case letters, digits and '-', 1-63 characters"})]
Name = Annotated[str, AfterValidator(_name), WithJsonSchema(
    {"type": "string", "pattern": NAME_RE.pattern,
     "description": "name: lower-case letters, digits, '-' or '_', 1-63 characters"})]
Mac = Annotated[str, AfterValidator(_mac), WithJsonSchema(
    {"type": "string", "pattern": r"^\s*[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}\s*$",
     "description": "MAC address, six hex pairs such as 52:54:00:12:34:56"})]


# ---------------------------------------------------------------- hosts and URLs
# Every inventory value a connection is opened to is one of these (see the audit above).

_DNS_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# RFC 1123 section 2.1 host name: dot-separated labels, at most 253 characters in all.
HOST_NAME_RE = re.compile(rf"^(?=.{{1,253}}$){_DNS_LABEL}(\.{_DNS_LABEL})*$")
_HOST_SCHEMA: dict[str, Any] = {
    "type": "string", "maxLength": 253,
    "anyOf": [{"pattern": HOST_NAME_RE.pattern}, {"pattern": r"^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*$"}],
    "description": "an IPv4 or IPv6 address, or an RFC 1123 host name"}
HOST_RULE = ("write an IPv4 or IPv6 address or a host name (letters, digits, '-' and '.'), "
             "with nothing around it: no user:password@, no scheme, path or port")


def _host(value: str) -> str:
    """An IP literal or an RFC 1123 host name: nothing a URL, ssh or a shell would read as
    more than a host (a login, a path, an option, a second word). The value is never put
    in the message: a mistyped "user:password@host" must not reach a CI log."""
    if parse_ipv4(value) is not None:
        return value
    if ":" in value:
        try:
            IPv6Address(value)
        except ValueError:
            raise ValueError(f"not an IP address or host name: {HOST_RULE}") from None
        if "%" in value:
            raise ValueError("an IPv6 zone (%interface) cannot be used: give a routable "
                             "address or a host name")
        return value
    if not HOST_NAME_RE.match(value):
        raise ValueError(f"not an IP address or host name: {HOST_RULE}")
    if value.rsplit(".", 1)[-1].isdigit():  # RFC 1123 2.1: a name never looks numeric
        raise ValueError("not an IP address: write four numbers 0-255, such as 10.0.0.1 "
                         "(or a host name whose last label is not a number)")
    return value


def _host_port(value: str) -> str:
    """host[:port], or [IPv6]:port (the port is then required: without one the address
    would read as host:port)."""
    host, port = value, ""
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep or ":" not in host:
            raise ValueError("write an IPv6 endpoint as [address]:port, such as [fd00::10]:6443")
    elif value.count(":") == 1:
        host, port = value.split(":")
    elif ":" in value:
        raise ValueError("write an IPv6 endpoint as [address]:port, such as [fd00::10]:6443")
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError("the port after ':' must be a number 1-65535")
    _host(host)
    return value


def _url(schemes: tuple[str, ...]) -> Any:
    """A validator: the URL's scheme is one of `schemes`, it holds no login, and its host
    is a Host (file: URLs have none). The URL is never put in the message."""
    def check(url: str) -> str:
        _no_login(url)
        parts = urlsplit(url)
        if parts.scheme not in schemes:
            raise ValueError(f"the URL must start with {' or '.join(s + '://' for s in schemes)}")
        if parts.scheme == "file":
            if parts.netloc:
                raise ValueError("write a file URL with three slashes: file:///srv/mirror")
            return url
        try:
            port = parts.port
        except ValueError:
            raise ValueError("the URL's port must be a number 1-65535") from None
        host = parts.hostname or ""
        if not host or port == 0:
            raise ValueError("the URL names no host (or port 0)")
        try:
            _host(host)
        except ValueError as exc:
            raise ValueError(f"the URL's host: {exc}") from None
        return url
    return AfterValidator(check)


Host = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_host),
                 WithJsonSchema(_HOST_SCHEMA)]
def _dns_name(value: str) -> str:
    """A domain name (a search domain): a host name's rules, and not an address."""
    if parse_ipv4(value) is not None or ":" in value:
        raise ValueError("a domain name, not an address: letters, digits, '-' and '.'")
    return _host(value)


# A DNS domain (a search domain): RFC 1123 labels, not numeric at the end.
DnsName = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_dns_name),
                    WithJsonSchema({"type": "string", "maxLength": 253,
                                    "pattern": HOST_NAME_RE.pattern,
                                    "description": "a DNS domain name"})]
HostPort = Annotated[str, Field(min_length=1, max_length=261), AfterValidator(_host_port),
                     WithJsonSchema({
                         "type": "string", "maxLength": 261,
                         "pattern": r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?$",
                         "description": "host[:port], or [IPv6 address]:port"})]
# apt's sources.list lines and get_url bases: http(s), or a file URL on the node itself.
MirrorUrl = Annotated[str, Field(max_length=2048, pattern=MIRROR_RE),
                      _url(("http", "https", "file"))]
# What a daemon or a BMC fetches over the network: containerd, helm, virtual media.
HttpUrl = Annotated[str, Field(max_length=2048, pattern=MIRROR_RE), _url(("http", "https"))]


class Model(BaseModel):
    """Base: frozen, unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)
