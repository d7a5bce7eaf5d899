"""Where a command finds the remote tier: its URL, the storage plugin and the storage options,
one rule for every command that touches the tier (``scrub``, ``restore``, ``tier``, and the
configuration ``demo`` leaves in its data dir for later commands).

Precedence, highest first:

1. the command's URL argument and its ``--option KEY=VALUE`` flags (``scrub``, ``restore``);
2. ``--set remote.storage.url=...`` and ``--set remote.storage.options.KEY=...`` (or Kafka's
   ``rsm.config.KEY``);
3. the ``--config FILE``;
4. ``<data-dir>/server.properties``, read when no ``--config`` is given.

The plugin is ``remote.storage.manager`` from the settings, else the one the URL's scheme
calls for (``s3://`` s3, a path or ``file://`` local). A URL argument of another kind of tier
than the settings' URL (a local path while the settings name an S3 bucket) takes neither the
settings' plugin nor their storage options, which are another store's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierlog.cli._common import CliError, Settings, parse_assignments
from tierlog.common.secrets import is_secret
from tierlog.remote.tier.options import (
    CONFIG_PREFIXES,
    OPTIONS_PREFIX,
    MaskedOptions,
    backend_for_url,
    options_under,
)

log = logging.getLogger(__name__)

MANAGER_KEY = "remote.storage.manager"
URL_KEY = "remote.storage.url"


@dataclass(frozen=True, slots=True)
class TierOptions:
    """The remote tier a command works on. Immutable; the repr masks secrets."""

    url: str
    """The tier's fsspec URL (``s3://bucket/prefix``, ``file:///dir`` or a path)."""
    manager: str
    """The remote storage plugin (``remote.storage.manager``)."""
    options: MaskedOptions
    """The storage options, names without a prefix (``endpoint_url``, ``key``, ...)."""

    def config(self) -> dict[str, Any]:
        """The settings naming this tier: its plugin, URL and ``remote.storage.options.*``."""
        return {MANAGER_KEY: self.manager, URL_KEY: self.url,
                **{OPTIONS_PREFIX + name: value for name, value in self.options.items()}}

    def apply(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with this tier in place of whatever tier settings it held."""
        kept = {k: v for k, v in config.items()
                if k not in (MANAGER_KEY, URL_KEY) and not k.startswith(CONFIG_PREFIXES)}
        return {**kept, **self.config()}

    def saved_config(self) -> dict[str, Any]:
        """:meth:`config` without the secrets (keys, passwords, tokens): what may be written
        to a file for later commands."""
        return {k: v for k, v in self.config().items() if not is_secret(k)}

    @property
    def secret_names(self) -> list[str]:
        """The settings :meth:`saved_config` leaves out, sorted."""
        return sorted(OPTIONS_PREFIX + name for name in self.options if is_secret(name))


def tier_options(st: Settings, url: str | None = None, options: Sequence[str] | None = None,
                 *, purpose: str = "work on") -> TierOptions:
    """The tier of a command (see the module docstring): ``url`` and ``options`` (``KEY=VALUE``
    texts of ``--option``) from its arguments, the rest from the resolved settings ``st``.
    CliError when no URL is given anywhere (``purpose`` says what the command needed it
    for: "scrub", "restore from")."""
    config = st.config
    configured_url = str(config.get(URL_KEY) or "")
    chosen = url or configured_url
    if not chosen:
        raise CliError(f"no remote tier to {purpose}: pass its URL, or set {URL_KEY} (with "
                       f"--set, in the --config file or in <data-dir>/server.properties)")
    from_settings = options_under(CONFIG_PREFIXES, config)
    same_kind = url is None or not configured_url or \
        backend_for_url(url) == backend_for_url(configured_url)
    manager = str(config.get(MANAGER_KEY) or "") if same_kind else ""
    if not same_kind and from_settings:
        log.info("the settings' storage options (%s) are for %s, not %s: not used",
                 ", ".join(sorted(from_settings)), configured_url, url)
        from_settings = {}
    given = parse_assignments(options, "--option")
    return TierOptions(url=chosen, manager=manager or backend_for_url(chosen),
                       options=MaskedOptions({**from_settings, **given}))


def with_configured_tier(st: Settings) -> Settings:
    """``st`` with its tier resolved by :func:`tier_options` (the plugin named or implied by
    the URL's scheme), or unchanged when it names no tier."""
    if not st.config.get(URL_KEY):
        return st
    return Settings(st.data_dirs, tier_options(st).apply(st.config))
