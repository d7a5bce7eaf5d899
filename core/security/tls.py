"""TLS contexts from Kafka's ``ssl.*`` settings: :func:`server_context` for an SSL or SASL_SSL
listener, :func:`client_context` for the node's own connections to others (replication).

Only PEM stores are supported (a file, or inline PEM text in the config), through Python's
``ssl`` and nothing hand-written. Inline key material reaches OpenSSL through an anonymous
in-memory file (``memfd_create``) or, where there is none, a 0600 temporary file removed as
soon as it is read; trusted certificates go in as ``cadata``. Secret values (see
:mod:`tierlog.security.sensitive`) never appear in an error or a log line.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tierlog.errors import ConfigError
from tierlog.security.cipher_suites import suites_by_name

log = logging.getLogger(__name__)

#: The only store type: Kafka's default is JKS, which Python's ssl cannot read.
PEM = "PEM"
#: Kafka's defaults.
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"
DEFAULT_PROTOCOL = "TLSv1.3"
DEFAULT_CLIENT_AUTH = "none"
DEFAULT_ENDPOINT_IDENTIFICATION = "https"
#: ``ssl.client.auth`` -> what the server asks of the client's certificate.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
#: The TLS versions served; older ones named in ``ssl.enabled.protocols`` are skipped with a
#: warning, as Java's own disabled algorithms skip them.
VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_OBSOLETE = frozenset({"SSLv2", "SSLv2Hello", "SSLv3", "TLSv1", "TLSv1.1"})
#: ``ssl.protocol`` values (Java's SSLContext names) -> the highest version they allow.
_CONTEXT_PROTOCOLS = {"TLS": ssl.TLSVersion.TLSv1_3, "SSL": ssl.TLSVersion.TLSv1_3,
                      "TLSv1.3": ssl.TLSVersion.TLSv1_3, "TLSv1.2": ssl.TLSVersion.TLSv1_2}
#: The keys this module reads (for the server's list of known keys).
TLS_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
})


def _text(config: Mapping[str, object], key: str) -> str:
    value = config.get(key)
    return "" if value is None else str(value).strip()


def _items(config: Mapping[str, object], key: str, default: str = "") -> list[str]:
    text = default if config.get(key) is None else _text(config, key)
    return [item.strip() for item in text.split(",") if item.strip()]


def _check_pem(config: Mapping[str, object], key: str) -> None:
    kind = _text(config, key) or PEM
    if kind.upper() != PEM:
        raise ConfigError(key, f"only PEM stores are supported, got {kind!r} (convert a "
                               "PKCS12 store with: openssl pkcs12 -in store.p12 -nodes)")


def _versions(config: Mapping[str, object]) -> list[ssl.TLSVersion]:
    """``ssl.enabled.protocols`` within what ``ssl.protocol`` allows, lowest first."""
    protocol = _text(config, "ssl.protocol") or DEFAULT_PROTOCOL
    highest = _CONTEXT_PROTOCOLS.get(protocol)
    if highest is None:
        raise ConfigError("ssl.protocol", f"unknown or unsupported protocol {protocol!r} "
                                          f"(one of {', '.join(_CONTEXT_PROTOCOLS)})")
    versions = set()
    for name in _items(config, "ssl.enabled.protocols", DEFAULT_ENABLED_PROTOCOLS):
        if name in _OBSOLETE:
            log.warning("ssl.enabled.protocols: %s is not served (TLS below 1.2 is refused)",
                        name)
        elif name in VERSIONS:
            versions.add(VERSIONS[name])
        else:
            raise ConfigError("ssl.enabled.protocols", f"unknown protocol {name!r} (one of "
                                                       f"{', '.join(VERSIONS)})")
    usable = sorted(v for v in versions if v <= highest)
    if not usable:
        raise ConfigError("ssl.enabled.protocols", f"enables no version {protocol} allows "
                                                   "(TLSv1.2 or TLSv1.3)")
    return usable


def _apply_ciphers(context: ssl.SSLContext, config: Mapping[str, object],
                   versions: list[ssl.TLSVersion]) -> list[ssl.TLSVersion]:
    """Narrow ``context`` to ``ssl.cipher.suites`` (IANA or OpenSSL names); the versions left
    are those with a named suite, as Java serves only those."""
    names = _items(config, "ssl.cipher.suites")
    if not names:
        return versions
    table = suites_by_name()
    tls12: list[str] = []
    tls13: set[str] = set()
    for name in names:
        suite = table.get(name.upper())
        if suite is None:
            raise ConfigError("ssl.cipher.suites", f"unknown cipher suite {name!r}: neither an "
                              "IANA name (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) nor an "
                              f"OpenSSL name known to {ssl.OPENSSL_VERSION}")
        if suite.tls13:
            tls13.add(suite.openssl_name)
        else:
            tls12.append(suite.openssl_name)
    usable = [v for v in versions if (tls13 if v is ssl.TLSVersion.TLSv1_3 else tls12)]
    if not usable:
        raise ConfigError("ssl.cipher.suites", f"names no suite for the enabled protocols "
                          f"({', '.join(v.name for v in versions)})")
    if ssl.TLSVersion.TLSv1_2 in usable:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError("ssl.cipher.suites", f"OpenSSL refuses every TLS 1.2 suite "
                              f"named ({', '.join(tls12)})") from None
    all_tls13 = {s.openssl_name for s in table.values() if s.tls13}
    if ssl.TLSVersion.TLSv1_3 in usable and tls13 != all_tls13:
        log.warning("ssl.cipher.suites: Python's ssl cannot narrow TLS 1.3 suites; %s stay "
                    "enabled", ", ".join(sorted(all_tls13)))
    return usable


@contextmanager
def private_pem_path(pem: str) -> Iterator[str]:
    """A path OpenSSL can read ``pem`` from, readable by this user only and gone on exit:
    an anonymous in-memory file where the system has one, else a 0600 temporary file."""
    data = pem.encode()
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("tierlog-pem", os.MFD_CLOEXEC)
        try:
            os.fchmod(fd, 0o600)  # reachable through /proc only, but not even there by others
            _write_all(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="tierlog-", suffix=".pem")  # mode 0600
    try:
        _write_all(fd, data)
        os.close(fd)
        fd = -1
        yield path
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _load_chain(context: ssl.SSLContext, path: str, where: str, key_password: str | None,
                shown: str) -> None:
    """Load a PEM key and its certificate chain; ``where`` names the setting, ``shown`` what
    an error may say of it (a file's path, never inline text)."""

    asked = []

    def password() -> bytes:
        # Always a callable: with none, OpenSSL would prompt on the terminal for a passphrase.
        asked.append(True)
        if key_password is None:
            raise ConfigError("ssl.key.password", f"the private key of {where} is encrypted: "
                                                  "set ssl.key.password")
        return key_password.encode()

    try:
        context.load_cert_chain(path, password=password)
    except ssl.SSLError as e:
        # OpenSSL says only "PEM lib" when the passphrase is wrong: it asked for one, and
        # failed for some reason other than a key that does not match the certificate
        if asked and e.reason != "KEY_VALUES_MISMATCH":
            raise ConfigError("ssl.key.password",
                              f"does not decrypt the private key of {where}") from None
        raise ConfigError(where, f"{shown} holds no PEM private key matching its certificate "
                                 f"chain ({e.reason or e.strerror})") from None
    except OSError as e:
        raise ConfigError(where, f"cannot read {shown}: {e.strerror}") from None


def _load_keystore(context: ssl.SSLContext, config: Mapping[str, object], *,
                   required: bool) -> bool:
    """Load the key store into ``context``; whether there was one."""
    _check_pem(config, "ssl.keystore.type")
    location = _text(config, "ssl.keystore.location")
    key = _text(config, "ssl.keystore.key")
    chain = _text(config, "ssl.keystore.certificate.chain")
    key_password = _text(config, "ssl.key.password") or None
    if (key or location) and _text(config, "ssl.keystore.password"):
        raise ConfigError("ssl.keystore.password", "cannot be used with a PEM key store: the "
                                                   "key's password is ssl.key.password")
    if key and location:
        raise ConfigError("ssl.keystore.key", "and ssl.keystore.location are both set; set one")
    if bool(key) != bool(chain):
        missing = "ssl.keystore.certificate.chain" if key else "ssl.keystore.key"
        raise ConfigError(missing, "must be set with "
                          f"{'ssl.keystore.key' if key else 'ssl.keystore.certificate.chain'}")
    if key:
        with private_pem_path(f"{key}\n{chain}\n") as path:
            _load_chain(context, path, "ssl.keystore.key", key_password,
                        "ssl.keystore.key with ssl.keystore.certificate.chain")
        return True
    if location:
        _load_chain(context, location, "ssl.keystore.location", key_password, repr(location))
        return True
    if required:
        raise ConfigError("ssl.keystore.location", "a TLS listener needs a key store: set "
                          "ssl.keystore.location, or ssl.keystore.key with "
                          "ssl.keystore.certificate.chain")
    return False


def _load_truststore(context: ssl.SSLContext, config: Mapping[str, object],
                     purpose: ssl.Purpose) -> str:
    """Load the trusted certificates into ``context``; what they came from, for the log."""
    _check_pem(config, "ssl.truststore.type")
    location = _text(config, "ssl.truststore.location")
    inline = _text(config, "ssl.truststore.certificates")
    if (location or inline) and _text(config, "ssl.truststore.password"):
        raise ConfigError("ssl.truststore.password", "cannot be used with a PEM trust store")
    if location and inline:
        raise ConfigError("ssl.truststore.certificates", "and ssl.truststore.location are both "
                                                         "set; set one")
    try:
        if inline:
            context.load_verify_locations(cadata=inline)
            return "ssl.truststore.certificates"
        if location:
            context.load_verify_locations(cafile=location)
            return location
    except (ssl.SSLError, ValueError):
        where, shown = (("ssl.truststore.certificates", "the inline text") if inline
                        else ("ssl.truststore.location", repr(location)))
        raise ConfigError(where, f"{shown} holds no PEM certificate") from None
    except OSError as e:
        raise ConfigError("ssl.truststore.location",
                          f"cannot read {location!r}: {e.strerror}") from None
    context.load_default_certs(purpose)
    return "the system's certificate authorities"


def _base(protocol: int, config: Mapping[str, object]) -> tuple[ssl.SSLContext, str]:
    context = ssl.SSLContext(protocol)
    versions = _apply_ciphers(context, config, _versions(config))
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    return context, "/".join(v.name for v in versions)


def server_context(config: Mapping[str, object]) -> ssl.SSLContext:
    """The context of a TLS listener from its ``ssl.*`` settings (the listener's view, see
    ``listeners.listener_config``); ConfigError names the first bad key."""
    context, versions = _base(ssl.PROTOCOL_TLS_SERVER, config)
    _load_keystore(context, config, required=True)
    client_auth = (_text(config, "ssl.client.auth") or DEFAULT_CLIENT_AUTH).lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError("ssl.client.auth", f"expects none, requested or required, got "
                                             f"{client_auth!r}")
    trusted = "none"
    if client_auth != "none" or _text(config, "ssl.truststore.location") or _text(
            config, "ssl.truststore.certificates"):
        trusted = _load_truststore(context, config, ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = CLIENT_AUTH[client_auth]
    log.info("TLS server context: %s, client certificates %s, trusting %s", versions,
             client_auth, trusted)
    return context


def client_context(config: Mapping[str, object]) -> ssl.SSLContext:
    """The context of a connection to another node: the server's certificate always checked
    against the trust store, its host name too unless
    ``ssl.endpoint.identification.algorithm`` is empty; a key store if one is set."""
    context, versions = _base(ssl.PROTOCOL_TLS_CLIENT, config)
    has_key = _load_keystore(context, config, required=False)
    trusted = _load_truststore(context, config, ssl.Purpose.SERVER_AUTH)
    algorithm = (DEFAULT_ENDPOINT_IDENTIFICATION
                 if config.get("ssl.endpoint.identification.algorithm") is None
                 else _text(config, "ssl.endpoint.identification.algorithm"))
    if algorithm.lower() not in ("https", ""):
        raise ConfigError("ssl.endpoint.identification.algorithm",
                          f"expects https or nothing, got {algorithm!r}")
    context.check_hostname = algorithm.lower() == "https"
    log.info("TLS client context: %s, %s, trusting %s, host name check %s", versions,
             "with a client certificate" if has_key else "no client certificate", trusted,
             "on" if context.check_hostname else "off")
    return context
