"""The raw client's TLS edge on real sockets: a local TLS server that answers ApiVersions
the way a broker does (bytes built here), with a certificate made for the test. No broker
needed; it checks the handshake the ``ssl.*`` settings configure, not Kafka."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pipeline.coordinator.connection import Connection, TlsUntrusted

# ApiVersions v3 answer body: error 0, [ApiVersions 0..4, ListGroups 0..5], throttle 0, no tags
ANSWER = (b"\x00\x00" + b"\x03" + b"\x00\x12\x00\x00\x00\x04\x00" + b"\x00\x10\x00\x00\x00\x05\x00"
          + b"\x00\x00\x00\x00" + b"\x00")  # fmt: skip


def _certificate(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lagpilot-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = folder / "broker.pem", folder / "broker.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    cert, key = _certificate(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(raw, server_side=True) as conn:
                    size = struct.unpack(">i", conn.recv(4))[0]
                    request = b""
                    while len(request) < size:
                        request += conn.recv(size - len(request))
                    correlation = request[4:8]  # after api key and version
                    conn.sendall(struct.pack(">i", 4 + len(ANSWER)) + correlation + ANSWER)
            except (OSError, ssl.SSLError):
                pass  # a client that refused our certificate

    threading.Thread(target=serve, daemon=True).start()
    yield port, cert
    listener.close()


def test_tls_with_the_ca_negotiates_api_versions(tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    conn = Connection("127.0.0.1", port, {"security.protocol": "SSL",
                                          "ssl.ca.location": str(cert)}, timeout_s=5)  # fmt: skip
    conn.open()
    assert conn.versions.api_keys == {18: (0, 4), 16: (0, 5)}
    assert conn.version(16, 5, 5) == 5 and conn.version(90, 0, 1) is None
    conn.close()


def test_an_untrusted_certificate_names_ssl_ca_location(tls_server: tuple[int, Path]) -> None:
    port, _ = tls_server
    conn = Connection("127.0.0.1", port, {"security.protocol": "SSL"}, timeout_s=5)
    with pytest.raises(TlsUntrusted, match=r"set ssl\.ca\.location") as exc:
        conn.open()
    assert not exc.value.retriable


def test_verification_off_connects_to_an_untrusted_certificate(
    tls_server: tuple[int, Path],
) -> None:
    port, _ = tls_server
    config = {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}
    conn = Connection("127.0.0.1", port, config, timeout_s=5)
    conn.open()
    assert 18 in conn.versions.api_keys
    conn.close()
