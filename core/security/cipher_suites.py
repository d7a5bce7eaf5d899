"""Cipher suite names: Kafka's users write IANA names (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``,
Java's names), OpenSSL knows its own (``ECDHE-RSA-AES128-GCM-SHA256``). The IANA name of each
suite is derived from what Python's ``ssl`` reports of it (key exchange, authentication,
cipher, digest), so the table follows the OpenSSL Python is linked against, and is never a
hand-kept copy of the registry.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

#: Every suite OpenSSL knows, weak ones included, so that a name is known even when the
#: security level then refuses it (a clearer error than "unknown").
_EVERY_SUITE = "ALL:COMPLEMENTOFALL:@SECLEVEL=0"
_KEY_EXCHANGES = {"kx-ecdhe": "ECDHE", "kx-dhe": "DHE", "kx-rsa": "RSA", "kx-psk": "PSK",
                  "kx-dhe-psk": "DHE_PSK", "kx-ecdhe-psk": "ECDHE_PSK", "kx-rsa-psk": "RSA_PSK",
                  "kx-srp": "SRP_SHA"}
_AUTHENTICATIONS = {"auth-rsa": "RSA", "auth-ecdsa": "ECDSA", "auth-dss": "DSS"}
_ANONYMOUS = {"ECDHE": "ECDH_anon", "DHE": "DH_anon"}
_DIGESTS = {"sha1": "SHA", "sha256": "SHA256", "sha384": "SHA384", "md5": "MD5"}
#: Ciphers whose IANA part is not their OpenSSL name upper-cased (in OpenSSL builds that still
#: offer them).
_CIPHERS = {"des-ede3-cbc": "3DES_EDE_CBC", "rc4": "RC4_128"}


@dataclass(frozen=True, slots=True)
class CipherSuite:
    """One suite OpenSSL offers, by both of its names."""

    openssl_name: str
    """The name ``SSLContext.set_ciphers`` takes (TLS 1.3 suites use the IANA name)."""
    iana_name: str | None
    """The IANA (and Java) name; None for a suite whose name cannot be derived."""
    tls13: bool
    """A TLS 1.3 suite (Python's ``ssl`` cannot narrow those; OpenSSL's defaults stay on)."""


def iana_name(cipher: Mapping[str, object]) -> str | None:
    """The IANA name of one entry of ``SSLContext.get_ciphers()``; None when its parts are
    not ones this function knows (the suite is then reachable by its OpenSSL name only)."""
    name = str(cipher["name"])
    if cipher["protocol"] == "TLSv1.3":
        return name
    exchange = _KEY_EXCHANGES.get(str(cipher["kea"]))
    auth = str(cipher["auth"])
    if exchange is None:
        return None
    if exchange == "SRP_SHA":
        exchange += f"_{_AUTHENTICATIONS[auth]}" if auth in _AUTHENTICATIONS else ""
    elif exchange in _ANONYMOUS and auth == "auth-null":
        exchange = _ANONYMOUS[exchange]
    elif exchange in _ANONYMOUS:
        if auth not in _AUTHENTICATIONS:
            return None
        exchange = f"{exchange}_{_AUTHENTICATIONS[auth]}"
    symmetric = cipher["symmetric"]
    cipher_part = ("NULL" if symmetric is None else _CIPHERS.get(str(symmetric))
                   or str(symmetric).upper().replace("-", "_"))
    if cipher_part.endswith("_CCM") and name.endswith("CCM8"):
        cipher_part += "_8"
        if exchange == "DHE_PSK":  # RFC 6655 names these two TLS_PSK_DHE_WITH_AES_*_CCM_8
            exchange = "PSK_DHE"
    digest = cipher["digest"]
    if digest is not None:
        mac = _DIGESTS.get(str(digest))
        if mac is None:
            return None
    elif name.endswith(("-SHA256", "-SHA384")):  # an AEAD suite names its PRF hash
        mac = name.rsplit("-", 1)[1]
    else:  # ChaCha20-Poly1305 suites use SHA256; CCM suites name no hash
        mac = "SHA256" if cipher_part == "CHACHA20_POLY1305" else ""
    return f"TLS_{exchange}_WITH_{cipher_part}" + (f"_{mac}" if mac else "")


def known_suites() -> list[CipherSuite]:
    """Every suite of the OpenSSL Python is linked against, with both names."""
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    scratch.set_ciphers(_EVERY_SUITE)
    return [CipherSuite(str(c["name"]), iana_name(c), c["protocol"] == "TLSv1.3")
            for c in scratch.get_ciphers()]


def suites_by_name() -> dict[str, CipherSuite]:
    """Each suite under its IANA and its OpenSSL name, upper-cased (Kafka's users write
    either; Java matches them exactly, so case is only forgiven, never guessed)."""
    table: dict[str, CipherSuite] = {}
    for suite in known_suites():
        table.setdefault(suite.openssl_name.upper(), suite)
        if suite.iana_name is not None:
            table.setdefault(suite.iana_name.upper(), suite)
    return table
