"""A certificate authority and server certificates for a local secured Kafka cluster.

Everything is PEM: Kafka reads a PEM key store (unencrypted PKCS#8 key, then the certificate
chain, in one file) and a PEM trust store, librdkafka reads the CA file as it is. Keys live
only in the run's own directory; certificates are valid for a week.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

_VALID = dt.timedelta(days=7)


@dataclass(frozen=True)
class ServerCert:
    keystore: Path  # key + certificate + CA, what ``ssl.keystore.location`` names
    certificate: Path


@dataclass(frozen=True)
class Authority:
    """A CA whose key stays in ``dir``; ``cert`` is what clients trust."""

    dir: Path

    @property
    def cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def key(self) -> Path:
        return self.dir / "ca.key"

    @classmethod
    def create(cls, dir: Path, name: str = "connmon local CA") -> Authority:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        dir.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        ca = cls(dir)
        _write_key(ca.key, key)
        ca.cert.write_bytes(_pem(cert))
        return ca

    def issue(self, name: str, hosts: list[str], out_dir: Path) -> ServerCert:
        """A server certificate for ``hosts`` (IP addresses or DNS names), signed by this CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_cert = x509.load_pem_x509_certificate(self.cert.read_bytes())
        ca_key = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = []
        for h in dict.fromkeys(hosts):
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        crt = out_dir / f"{name}.crt"
        crt.write_bytes(_pem(cert))
        store = out_dir / f"{name}.keystore.pem"
        _write_key(store, key, extra=_pem(cert) + self.cert.read_bytes())
        return ServerCert(store, crt)


def _pem(cert: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)  # type: ignore[attr-defined]


def _write_key(path: Path, key: object, extra: bytes = b"") -> None:
    """Write an unencrypted PKCS#8 key (plus ``extra``), readable by the owner only."""
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(data + extra)
