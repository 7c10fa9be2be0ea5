"""Read the TLS certificate a server presents (for the `tls-certexpiry` task).

One handshake verifies the chain and the host name against the system's certificate
authorities (plus an optional extra CA file). When that fails, a second handshake without
verification still reads the certificate, so an expired or self-signed certificate is
reported with its dates instead of only "verify failed". SNI carries the host name.

The certificate (DER) is read here, with the standard library: `ssl` describes a peer's
certificate only when it verified, and the `cryptography` package, which reads any, costs
every process that imports PyMySQL (it imports `cryptography` whenever it is installed).
What is read: the names, the validity, the serial number and the subjectAltName's DNS
names and IP addresses, as `cryptography` gives them (RFC 4514 names).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass
from datetime import datetime

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
    return describe_certificate(der, verified, verify_error)


def _handshake(context: ssl.SSLContext, host: str, port: int, timeout: float) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    if not der:
        raise ssl.SSLError(f"{host}:{port} sent no certificate")
    return der


def describe_certificate(der: bytes, verified: bool = False,
                         verify_error: str | None = None) -> CertificateInfo:
    """Read an X.509 certificate (RFC 5280) with the standard library only.

    Args:
        der: the certificate, DER-encoded (`SSLSocket.getpeercert(binary_form=True)`).
        verified, verify_error: what the handshake found, copied into the result.

    Returns:
        Its names (RFC 4514, as `cryptography` writes them), validity (naive UTC),
        serial number and subjectAltName's DNS names and IP addresses.

    Raises:
        ValueError: `der` is not a certificate this reader understands.
    """
    try:
        tbs = _items(der, *_item(der, 0, len(der))[1:])[0]
        fields = _items(der, tbs[1], tbs[2])
        if fields[0][0] == 0xA0:  # [0] version; absent: version 1
            fields = fields[1:]
        serial, _algorithm, issuer, validity, subject = fields[:5]
        not_before, not_after = (_time(der, *item) for item in _items(der, *validity[1:]))
        names: tuple[str, ...] = ()
        for tag, start, end in fields[5:]:
            if tag == 0xA3:  # [3] extensions
                names = _alt_names(der, *_item(der, start, end)[1:])
        return CertificateInfo(
            subject=_name(der, subject), issuer=_name(der, issuer), not_before=not_before,
            not_after=not_after,
            serial=format(int.from_bytes(der[serial[1]:serial[2]], "big", signed=True), "x"),
            names=names, verified=verified, verify_error=verify_error)
    except (IndexError, TypeError) as exc:  # ValueError: the reader's own
        raise ValueError(f"not an X.509 certificate: {exc}") from None


# DER: a tag byte, a length (short or long form), the content. An item is (tag, start,
# end) of its content in the certificate's bytes.

def _item(der: bytes, at: int, end: int) -> tuple[int, int, int]:
    """The item that starts at `at` (within `at:end`)."""
    tag, length = der[at], der[at + 1]
    at += 2
    if tag & 0x1F == 0x1F:
        raise ValueError("a high tag number")
    if length & 0x80:
        size = length & 0x7F
        if not 1 <= size <= 4:
            raise ValueError("a length of an unsupported form")
        length, at = int.from_bytes(der[at:at + size], "big"), at + size
    if at + length > end:
        raise ValueError("truncated")
    return tag, at, at + length


def _items(der: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """The items within `start:end` (the content of a SEQUENCE or SET)."""
    found = []
    while start < end:
        found.append(_item(der, start, end))
        start = found[-1][2]
    return found


def _oid(data: bytes) -> str:
    arcs, value = [], 0
    for byte in data:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in [first, arcs[0] - 40 * first, *arcs[1:]])


# The attribute names `cryptography` writes in RFC 4514 strings; others by their OID.
_ATTRIBUTE_NAMES = {"2.5.4.3": "CN", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
                    "2.5.4.11": "OU", "2.5.4.6": "C", "2.5.4.9": "STREET",
                    "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
# The string types of names, by tag: UTF8String, BMPString, UniversalString, TeletexString;
# PrintableString, IA5String, NumericString and VisibleString are ASCII.
_ENCODINGS = {0x0C: "utf-8", 0x1E: "utf-16-be", 0x1C: "utf-32-be", 0x14: "latin-1",
              0x13: "ascii", 0x16: "ascii", 0x12: "ascii", 0x1A: "ascii"}


def _name(der: bytes, name: tuple[int, int, int]) -> str:
    """A Name as RFC 4514 text, last RDN first (as `cryptography`'s `rfc4514_string`)."""
    rdns = []
    for _set, start, end in _items(der, *name[1:]):
        parts = []
        for _seq, a_start, a_end in _items(der, start, end):
            (_, o_start, o_end), (tag, v_start, v_end) = _items(der, a_start, a_end)[:2]
            oid, raw = _oid(der[o_start:o_end]), der[v_start:v_end]
            value = raw.decode(_ENCODINGS[tag]) if tag in _ENCODINGS else raw
            parts.append(f"{_ATTRIBUTE_NAMES.get(oid, oid)}={_escaped(value)}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


def _escaped(value: str | bytes) -> str:
    """RFC 4514 section 2.4's escaping of an attribute value (bytes: `#` and hex)."""
    if not value:
        return ""
    if isinstance(value, bytes):
        return "#" + value.hex()
    for char in '\\"+,;<>':
        value = value.replace(char, "\\" + char)
    value = value.replace("\0", "\\00")
    if value[0] in "# ":
        value = "\\" + value
    if value[-1] == " ":
        value = value[:-1] + "\\ "
    return value


def _time(der: bytes, tag: int, start: int, end: int) -> datetime:
    """UTCTime (two-digit year: 1950-2049) or GeneralizedTime, as naive UTC."""
    text = der[start:end].decode("ascii")
    if tag == 0x17:
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    elif tag != 0x18:
        raise ValueError(f"not a time (tag {tag:#x})")
    return datetime.strptime(text, "%Y%m%d%H%M%SZ")


def _alt_names(der: bytes, start: int, end: int) -> tuple[str, ...]:
    """The subjectAltName's DNS names, then its IP addresses; () without the extension."""
    for _seq, e_start, e_end in _items(der, start, end):
        parts = _items(der, e_start, e_end)
        if _oid(der[parts[0][1]:parts[0][2]]) != "2.5.29.17":
            continue
        _octets, v_start, v_end = parts[-1]
        general = _items(der, *_item(der, v_start, v_end)[1:])
        dns = [der[s:e].decode("ascii") for tag, s, e in general if tag == 0x82]
        ips = [str(ipaddress.ip_address(der[s:e])) for tag, s, e in general if tag == 0x87]
        return tuple(dns + ips)
    return ()

