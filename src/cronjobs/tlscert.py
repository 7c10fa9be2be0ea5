"""Read the TLS certificate a server presents (for the `tls-certexpiry` task).

One handshake verifies the chain and the host name against the system's certificate
authorities (plus an optional extra CA file). When that fails, a second handshake without
verification still reads the certificate, so an expired or self-signed certificate is
reported with its dates instead of only "verify failed". SNI carries the host name.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime

DEFAULT_PORT = 443


@dataclass(frozen=True)
class CertificateInfo:
    """What a server's leaf certificate says.

    Attributes:
        subject, issuer: RFC 4514 names (`CN=example.com,O=Example`).
        not_before, not_after: validity bounds, naive UTC.
        serial: the serial number in hex.
        names: DNS names and IP addresses of the subjectAltName extension.
        verified: True when the chain and host name verified.
        verify_error: why verification failed (None when `verified`).
    """

    subject: str
    issuer: str
    not_before: datetime
    not_after: datetime
    serial: str
    names: tuple[str, ...]
    verified: bool
    verify_error: str | None


def parse_target(target: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """Split `host`, `host:port` or `[v6-address]:port` into (host, port).

    Raises:
        ValueError: empty host, or a port that is not a number from 1 to 65535.
    """
    text = target.strip()
    host, port = text, str(default_port)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"not a host or host:port: {target!r}")
    return host, int(port)


def fetch_certificate(host: str, port: int = DEFAULT_PORT, *, timeout_seconds: float = 10,
                      ca_file: str | None = None) -> CertificateInfo:
    """Connect to `host:port`, do a TLS handshake with SNI and read the leaf certificate.

    Args:
        host: DNS name (sent as SNI and checked against the certificate) or IP address.
        port: TCP port.
        timeout_seconds: limit for the connection and each handshake (seconds).
        ca_file: PEM file of extra certificate authorities to trust.

    Returns:
        The certificate's details and whether it verified.

    Raises:
        OSError: the connection failed or timed out, or the TLS handshake failed for
            another reason than verification (`ssl.SSLError` is an `OSError`).
    """
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    try:
        der = _handshake(context, host, port, timeout_seconds)
        verified, verify_error = True, None
    except ssl.SSLCertVerificationError as exc:
        verified, verify_error = False, exc.verify_message or str(exc)
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        der = _handshake(unverified, host, port, timeout_seconds)
    return _describe(der, verified, verify_error)


def _handshake(context: ssl.SSLContext, host: str, port: int, timeout: float) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    if not der:
        raise ssl.SSLError(f"{host}:{port} sent no certificate")
    return der


def _describe(der: bytes, verified: bool, verify_error: str | None) -> CertificateInfo:
    # lazy: CLI start-up time (the registry imports the TLS handlers for every command
    # that dispatches; cryptography is needed only to read a fetched certificate)
    from cryptography import x509
    from cryptography.x509.oid import ExtensionOID

    cert = x509.load_der_x509_certificate(der)
    try:
        alt = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        names = tuple(alt.get_values_for_type(x509.DNSName)
                      + [str(ip) for ip in alt.get_values_for_type(x509.IPAddress)])
    except x509.ExtensionNotFound:
        names = ()
    return CertificateInfo(
        subject=cert.subject.rfc4514_string(), issuer=cert.issuer.rfc4514_string(),
        not_before=_naive(cert.not_valid_before_utc), not_after=_naive(cert.not_valid_after_utc),
        serial=format(cert.serial_number, "x"), names=names, verified=verified,
        verify_error=verify_error)


def _naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)
