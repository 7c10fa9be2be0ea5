"""The `tls-certexpiry` task against real local TLS servers whose certificates
(made here with `cryptography`, signed by a test CA) expire at known times; the task
reads them with the standard library (`tlscert.describe_certificate`), as `cryptography`
reads them.

The discover stage fans out one execute row per configured host (key: host, port, day);
the execute stage connects with SNI and a timeout and stores issuer, subject, expiry and
days left; below the threshold, unreachable, or not verifying, the row ends failed."""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID, NameOID, ObjectIdentifier

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.i18n import use_locale
from cronjobs.schedule.scheduler import tick
from cronjobs.testing import drain
from cronjobs.tlscert import describe_certificate
from handlers.TlsCertExpiryDiscover import TlsCertExpiryDiscover
from handlers.TlsCertExpiryExecute import TlsCertExpiryExecute

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

# The clock is frozen at a real instant: the handshake verifies against the real time,
# days left are counted from the frozen one.
NOW = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "cronjobs tests")])


class CA:
    """A test certificate authority that signs leaf certificates for `localhost`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (x509.CertificateBuilder().subject_name(_name("cronjobs test CA"))
                     .issuer_name(_name("cronjobs test CA")).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(NOW - timedelta(days=30))
                     .not_valid_after(NOW + timedelta(days=3650))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.file = folder / "ca.pem"
        self.file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def leaf(self, name: str, not_after: datetime) -> tuple[Path, Path]:
        """(cert file, key file) of a `localhost` certificate valid until `not_after`."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name("localhost"))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(NOW - timedelta(days=60)).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_file, key_file = self.folder / f"{name}.pem", self.folder / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_file, key_file


class TLSServer:
    """A TLS server on 127.0.0.1 that completes handshakes and records the SNI names."""

    def __init__(self, cert_file: Path | None, key_file: Path | None, handshake: bool = True):
        self.sni: list[str | None] = []
        self.context = None
        if handshake:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(cert_file, key_file)
            self.context.sni_callback = lambda sock, name, ctx: self.sni.append(name)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            if self.context is None:  # accept, then never answer: a hanging server
                self.held.append(conn)
                continue
            conn.settimeout(5)
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)  # until the client closes
            except (OSError, ssl.SSLError):
                conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def ca(tmp_path):
    return CA(tmp_path)


@pytest.fixture
def servers():
    made: list[TLSServer] = []

    def start(*args, **kwargs) -> TLSServer:
        made.append(TLSServer(*args, **kwargs))
        return made[-1]

    yield start
    for server in made:
        server.close()


def run_execute(app, port: int, **payload) -> dict:
    job_id = queue.dispatch("tls.certexpiry.execute", {"host": "localhost", "port": port,
                                                       **payload}, app=app)
    queue.process(job_id, app=app)
    row = queue.get(job_id, app=app)
    row["result"] = json.loads(row["result_payload"]) if row["result_payload"] else None
    return row


@SQLITE
def test_valid_certificate_is_read_with_sni_and_days_left(make_app, ca, servers):
    server = servers(*ca.leaf("good", NOW + timedelta(days=30, hours=1)))
    app = make_app(clock=FrozenClock(NOW), tls_ca_file=str(ca.file))
    row = run_execute(app, server.port)
    assert row["status"] == "completed", row["error"]
    result = row["result"]
    assert result["days_left"] == 30 and result["threshold_days"] == 14
    assert result["not_after"] == (NOW + timedelta(days=30, hours=1)).isoformat() + "Z"
    assert result["subject"] == "O=cronjobs tests,CN=localhost"
    assert result["issuer"] == "O=cronjobs tests,CN=cronjobs test CA"
    assert (result["verified"], result["verify_error"], result["error"]) == (True, None, None)
    assert "localhost" in server.sni  # SNI carried the host name


@SQLITE
def test_below_threshold_fails_with_the_days_in_the_error(make_app, ca, servers):
    server = servers(*ca.leaf("soon", NOW + timedelta(days=5, hours=2)))
    app = make_app(clock=FrozenClock(NOW), tls_ca_file=str(ca.file))
    row = run_execute(app, server.port)
    assert (row["status"], row["attempts"]) == ("failed", 1)  # MAX_ATTEMPTS 1: next day again
    assert row["result"]["days_left"] == 5 and row["result"]["verified"] is True
    assert f"certificate of localhost:{server.port} expires in 5 days" in row["error"]
    assert "below the threshold of 14 days" in row["error"]
    # the payload's threshold wins over the setting
    assert run_execute(app, server.port, threshold_days=3)["status"] == "completed"


@SQLITE
def test_expired_certificate_is_still_described(make_app, ca, servers):
    server = servers(*ca.leaf("old", NOW - timedelta(days=2) + timedelta(hours=1)))
    app = make_app(clock=FrozenClock(NOW), tls_ca_file=str(ca.file))
    row = run_execute(app, server.port)
    assert row["status"] == "failed"
    result = row["result"]
    assert result["days_left"] == -2 and result["verified"] is False
    assert "expired" in result["verify_error"]
    assert result["subject"] == "O=cronjobs tests,CN=localhost"


@SQLITE
def test_untrusted_issuer_fails_unless_verification_is_off(make_app, ca, servers):
    server = servers(*ca.leaf("private", NOW + timedelta(days=90)))
    app = make_app(clock=FrozenClock(NOW))  # the test CA is not trusted
    row = run_execute(app, server.port)
    assert row["status"] == "failed"
    assert "does not verify" in row["error"] and row["result"]["days_left"] == 90
    lax = make_app(clock=FrozenClock(NOW), tls_verify=False)
    row = run_execute(lax, server.port)
    assert row["status"] == "completed" and row["result"]["verified"] is False


@SQLITE
def test_unreachable_and_hanging_servers_fail_within_the_timeout(make_app, servers):
    app = make_app(clock=FrozenClock(NOW), tls_timeout_seconds=0.5)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    row = run_execute(app, port)
    assert row["status"] == "failed"
    assert row["error"].startswith(f"cannot read the certificate of localhost:{port}")
    hanging = servers(None, None, handshake=False)
    started = datetime.now()
    row = run_execute(app, hanging.port)
    assert row["status"] == "failed" and "timed out" in row["error"]
    assert datetime.now() - started < timedelta(seconds=3)


@SQLITE
def test_discover_fans_out_one_row_per_host_per_day(make_app, ca, servers):
    good = servers(*ca.leaf("a", NOW + timedelta(days=60)))
    soon = servers(*ca.leaf("b", NOW + timedelta(days=3)))
    hosts = (f"localhost:{good.port}", f"localhost:{soon.port}")
    app = make_app(clock=FrozenClock(NOW), tls_ca_file=str(ca.file), tls_hosts=hosts)
    started = {t: job for t, _, job in tick(NOW, app=app).started}
    drain(app)
    discover = queue.get(started["tls-certexpiry"], app=app)
    assert discover["status"] == "completed"
    jobs = json.loads(discover["result_payload"])["jobs"]
    rows = [queue.get(j, app=app) for j in jobs]
    day = NOW.strftime("%Y%m%d")
    assert [r["idempotency_key"] for r in rows] == [
        f"tls.certexpiry:localhost:{good.port}:{day}",
        f"tls.certexpiry:localhost:{soon.port}:{day}"]
    assert [r["parent_id"] for r in rows] == [discover["id"]] * 2
    assert [r["status"] for r in rows] == ["completed", "failed"]
    # the same day again (a second discover of that slot) adds no row
    again = queue.dispatch("tls.certexpiry.discover", {"slot": day}, app=app)
    queue.process(again, app=app)
    assert json.loads(queue.get(again, app=app)["result_payload"])["jobs"] == jobs


@SQLITE
def test_discover_without_hosts_cancels_with_no_targets(make_app):
    app = make_app(clock=FrozenClock(NOW))
    job_id = queue.dispatch("tls.certexpiry.discover", {"slot": "20260105"}, app=app)
    queue.process(job_id, app=app)
    assert queue.get(job_id, app=app) is None  # cancelled and childless: deleted


def test_results_tab_is_an_escaped_table_in_english_and_turkish():
    result = {"host": "<b>evil</b>", "port": 443, "subject": "CN=x", "issuer": "CN=<i>ca</i>",
              "not_after": "2026-02-01T00:00:00Z", "days_left": 5, "threshold_days": 14,
              "verified": False, "verify_error": "self signed", "error": "expires <soon>"}
    html = str(TlsCertExpiryExecute.render_summary(result))
    assert "&lt;b&gt;evil&lt;/b&gt;:443" in html and "<b>" not in html
    assert "CN=&lt;i&gt;ca&lt;/i&gt;" in html and "expires &lt;soon&gt;" in html
    assert "<th>Days left</th><td>5</td>" in html and "<th>Trusted</th><td>No: self signed" in html
    with use_locale("tr"):
        turkish = str(TlsCertExpiryExecute.render_summary(result))
        summary = str(TlsCertExpiryDiscover.render_summary({"hosts": ["a", "b"], "dispatched": 2}))
    assert "<th>Kalan gün</th><td>5</td>" in turkish and "<th>Veren</th>" in turkish
    assert "Hayır: self signed" in turkish
    assert "<th>Sunucular</th><td>a, b</td>" in summary


def _as_cryptography_reads(der: bytes) -> tuple:
    cert = x509.load_der_x509_certificate(der)
    try:
        alt = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        names = tuple(alt.get_values_for_type(x509.DNSName)
                      + [str(ip) for ip in alt.get_values_for_type(x509.IPAddress)])
    except x509.ExtensionNotFound:
        names = ()
    utc = [t.astimezone(UTC).replace(tzinfo=None)
           for t in (cert.not_valid_before_utc, cert.not_valid_after_utc)]
    return (cert.subject.rfc4514_string(), cert.issuer.rfc4514_string(), *utc,
            format(cert.serial_number, "x"), names)


def _odd_certificate(ca: CA, index: int) -> bytes:
    """A certificate with RFC 4514's escapes, a multi-valued RDN, UTF-8 and printable
    strings, attributes known by OID only, DNS and IP subject names, and validity dates
    on both sides of UTCTime's 2050 limit."""
    attr, rdn = x509.NameAttribute, x509.RelativeDistinguishedName
    names = [
        x509.Name([attr(NameOID.COUNTRY_NAME, "TR"),
                   attr(NameOID.COMMON_NAME, ' #a,b+c"d\\e;<f>g\0 ')]),
        x509.Name([rdn([attr(NameOID.COMMON_NAME, "x"), attr(NameOID.ORGANIZATION_NAME, "Şirket")]),
                   rdn([attr(NameOID.EMAIL_ADDRESS, "a@b.c")]),
                   rdn([attr(ObjectIdentifier("1.2.3.4.5"), "odd")]),
                   rdn([attr(NameOID.DOMAIN_COMPONENT, "com")]),
                   rdn([attr(NameOID.USER_ID, "uid")]),
                   rdn([attr(NameOID.LOCALITY_NAME, "Köln")])]),
    ]
    dates = [(datetime(1999, 1, 2, 3, 4, 5), datetime(2051, 1, 1, 0, 0, 1)),
             (datetime(1950, 1, 1), datetime(2049, 12, 31, 23, 59, 59))]
    alt = x509.SubjectAlternativeName([
        x509.DNSName("a.example"), x509.IPAddress(ipaddress.ip_address("10.1.2.3")),
        x509.DNSName("*.b.example"), x509.IPAddress(ipaddress.ip_address("2001:db8::1")),
        x509.RFC822Name("x@y.z")])
    builder = (x509.CertificateBuilder().subject_name(names[index]).issuer_name(ca.cert.subject)
               .public_key(ca.key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(dates[index][0]).not_valid_after(dates[index][1]))
    if index == 0:
        builder = builder.add_extension(alt, critical=False)
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


# a CA of the system's bundle has serial number 0 (RFC 5280 wants it positive)
@pytest.mark.filterwarnings("ignore:Parsed a serial number which wasn't positive")
def test_the_certificate_reader_reads_what_cryptography_reads(ca):
    bundle = ssl.get_default_verify_paths().openssl_cafile
    pems = Path(bundle).read_text().split("-----END CERTIFICATE-----") \
        if Path(bundle).is_file() else []
    ders = [ssl.PEM_cert_to_DER_cert(pem.strip() + "\n-----END CERTIFICATE-----\n")
            for pem in pems if "BEGIN CERTIFICATE" in pem]
    ders += [_odd_certificate(ca, 0), _odd_certificate(ca, 1), ca.cert.public_bytes(
        serialization.Encoding.DER)]
    ders += [x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(
        serialization.Encoding.DER) for path in ca.leaf("leaf", NOW + timedelta(days=1))[:1]]
    for der in ders:
        info = describe_certificate(der, verified=True)
        assert (info.subject, info.issuer, info.not_before, info.not_after, info.serial,
                info.names) == _as_cryptography_reads(der)
    for junk in (b"", b"junk", b"\x30\x05abc", b"\x30\x03\x30\x01\x00", ders[-1][:-40]):
        with pytest.raises(ValueError):
            describe_certificate(junk)


# The task reads a certificate that does not verify in a process that never imports
# `cryptography` (not a dependency of cronjobs: PyMySQL imports it whenever it is installed).
STDLIB_ONLY = """
import sys
from cronjobs.tlscert import fetch_certificate
cert = fetch_certificate("localhost", {port}, timeout_seconds=10)
assert not cert.verified and cert.subject == "O=cronjobs tests,CN=localhost", cert
print(cert.not_after.isoformat(), sorted(m for m in sys.modules if m.startswith("cryptography")))
"""


def test_a_certificate_that_does_not_verify_is_read_without_cryptography(ca, servers):
    server = servers(*ca.leaf("untrusted", NOW + timedelta(days=9, hours=1)))
    done = subprocess.run([sys.executable, "-c", STDLIB_ONLY.format(port=server.port)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [(NOW + timedelta(days=9, hours=1)).isoformat(), "[]"]
