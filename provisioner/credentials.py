"""Credential references -> (username, Secret), for every edge that logs in: BMCs now,
switches next. One resolver so that both follow the same rules (a name the site does not
define is a clear error; each reference is resolved once per run, however many nodes use
it; the value stays a `Secret` until the protocol library needs it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provisioner.errors import ConfigError
from provisioner.secrets import Secret, resolve

if TYPE_CHECKING:  # a resolver is handed a loaded site: the loader is not imported for it
    from provisioner.inventory.loader import LoadedSite


@dataclass(frozen=True)
class Login:
    username: str
    password: Secret


@dataclass
class CredentialResolver:
    """Resolves the site's named credentials on first use and remembers the result."""

    loaded: LoadedSite
    env: Mapping[str, str] = field(repr=False)  # the process's: PROVISION_* passwords
    _cache: dict[str, Login] = field(default_factory=dict)

    def login(self, name: str, *, user_of: str) -> Login:
        """The login named `name`; `user_of` (a host name) makes the error say who needs it."""
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        creds = self.loaded.site.credentials.get(name)
        if creds is None:
            raise ConfigError(f"{user_of}: credentials '{name}' are not defined",
                              hint="run `provision validate`")
        login = Login(creds.username, resolve(creds.password, self.env, self.loaded.base_dir))
        self._cache[name] = login
        return login
