"""Certificates made in the test with ``cryptography``, written as PEM files: a CA, a server
certificate for localhost and 127.0.0.1, a client certificate, an expired one, one from a CA
nobody trusts and one whose key is encrypted. ``make_pki(directory)`` builds them all.

RSA keys, so the classic ``TLS_ECDHE_RSA_*`` suites Kafka's users name are usable; one leaf key
is shared by the leaves (generation is the slow part; each leaf still has its own certificate).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The password of :attr:`Pki.encrypted`'s key.
KEY_PASSWORD = "s3cret-key-pass"
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """One leaf: its certificate chain and private key, as files and as PEM text."""

    cert: Path
    """The certificate chain (the leaf, then its CA)."""
    key: Path
    """The private key (PKCS#8; encrypted when ``password`` is set)."""
    keystore: Path
    """Key and chain in one file: what ``ssl.keystore.location`` names."""
    key_pem: str
    chain_pem: str
    password: str | None = None


@dataclass(frozen=True, slots=True)
class Pki:
    """Everything ``make_pki`` wrote."""

    ca: Path
    """The trusted CA's certificate (``ssl.truststore.location``)."""
    ca_pem: str
    server: KeyPair
    """CN=localhost, SAN localhost and 127.0.0.1, signed by the CA."""
    client: KeyPair
    """CN=client, for client authentication, signed by the CA."""
    expired: KeyPair
    """Like ``server``, but valid only until yesterday."""
    untrusted: KeyPair
    """Like ``server``, but signed by another CA (not in any trust store)."""
    encrypted: KeyPair
    """Like ``server``, its key encrypted with :data:`KEY_PASSWORD`."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _ca(common_name: str, key: rsa.RSAPrivateKey, now: datetime.datetime) -> x509.Certificate:
    return (x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(_name(common_name)).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))


def _leaf(common_name: str, key: rsa.RSAPrivateKey, ca: x509.Certificate,
          ca_key: rsa.RSAPrivateKey, *, client: bool, not_after: datetime.datetime,
          now: datetime.datetime) -> x509.Certificate:
    builder = (x509.CertificateBuilder().subject_name(_name(common_name))
               .issuer_name(ca.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - 2 * _DAY).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.CLIENT_AUTH if client
                    else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    if not client:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _write(directory: Path, stem: str, key: rsa.RSAPrivateKey, chain: list[x509.Certificate],
           password: str | None = None) -> KeyPair:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                encryption).decode()
    chain_pem = "".join(_pem(cert) for cert in chain)
    paths = [directory / f"{stem}{suffix}" for suffix in (".crt", ".key", ".keystore.pem")]
    for path, text in zip(paths, (chain_pem, key_pem, key_pem + chain_pem), strict=True):
        path.write_text(text)
    return KeyPair(*paths, key_pem=key_pem, chain_pem=chain_pem, password=password)


def make_pki(directory: Path) -> Pki:
    """Make every certificate of :class:`Pki` under ``directory`` (which must exist)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, other_ca_key, leaf_key = _key(), _key(), _key()
    ca, other_ca = _ca("tierlog test CA", ca_key, now), _ca("nobody's CA", other_ca_key, now)
    (directory / "ca.crt").write_text(_pem(ca))

    def leaf(stem: str, name: str, *, issuer: x509.Certificate = ca,
             issuer_key: rsa.RSAPrivateKey = ca_key, client: bool = False,
             not_after: datetime.datetime = now + 30 * _DAY,
             password: str | None = None) -> KeyPair:
        cert = _leaf(name, leaf_key, issuer, issuer_key, client=client, not_after=not_after,
                     now=now)
        return _write(directory, stem, leaf_key, [cert, issuer], password)

    return Pki(ca=directory / "ca.crt", ca_pem=_pem(ca),
               server=leaf("server", "localhost"),
               client=leaf("client", "client", client=True),
               expired=leaf("expired", "localhost", not_after=now - _DAY),
               untrusted=leaf("untrusted", "localhost", issuer=other_ca,
                              issuer_key=other_ca_key),
               encrypted=leaf("encrypted", "localhost", password=KEY_PASSWORD))
