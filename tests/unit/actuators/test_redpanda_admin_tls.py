"""RedpandaAdmin over TLS: a real handshake with certificates made for the test (the CA
given as ``tls_verify``, verification off, untrusted, and a client certificate)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import Any

import pytest

from actuators.redpanda_admin import RedpandaAdmin, RedpandaAdminError
from bench.support.redpanda_admin_cluster import ClusterModel
from bench.support.redpanda_admin_stub import RedpandaAdminStub
from tests.support.admin_api import Sleeps


def _issue(name: str, issuer: tuple[Any, Any] | None, *, ca: bool) -> tuple[Any, Any]:
    """(certificate, key) for ``name``; self-signed when ``issuer`` is None.

    cryptography is imported here, not at the top, so that without it only the TLS tests
    fail (loudly) and the rest of this module still runs.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signer_cert, signer_key = issuer if issuer else (None, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer_cert.subject if signer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    else:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(signer_key, hashes.SHA256()), key


def _write_pem(directory: Path, name: str, cert: Any, key: Any) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization

    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    directory = tmp_path_factory.mktemp("pki")
    ca = _issue("lagpilot-test-ca", None, ca=True)
    return {
        "ca": _write_pem(directory, "ca", *ca),
        "server": _write_pem(directory, "server", *_issue("redpanda-0", ca, ca=False)),
        "client": _write_pem(directory, "client", *_issue("lagpilot", ca, ca=False)),
    }


def _tls_stub(pki: dict[str, tuple[str, str]], *, mutual: bool) -> RedpandaAdminStub:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*pki["server"])
    if mutual:
        ctx.load_verify_locations(cafile=pki["ca"][0])
        ctx.verify_mode = ssl.CERT_REQUIRED
    return RedpandaAdminStub(0, ClusterModel(node_ids=(0,)), ssl_context=ctx).start()


def test_tls_verifies_the_server_against_the_given_ca(pki: dict[str, tuple[str, str]]) -> None:
    stub = _tls_stub(pki, mutual=False)
    try:
        with RedpandaAdmin(stub.url, tls_verify=pki["ca"][0]) as admin:
            assert [b["node_id"] for b in admin.brokers()] == [0]
        with RedpandaAdmin(stub.url, tls_verify=False) as admin:
            assert len(admin.brokers()) == 1
        sleeps = Sleeps()
        with (
            RedpandaAdmin(stub.url, sleep=sleeps) as admin,  # system CAs do not know ours
            pytest.raises(RedpandaAdminError, match="not trusted") as err,
        ):
            admin.brokers()
        assert err.value.retriable is False
        assert sleeps == []  # a trust failure is not retried
        assert "tls_verify" in str(err.value)
    finally:
        stub.stop()
    assert stub.violations == []


def test_tls_client_certificate_is_presented(pki: dict[str, tuple[str, str]]) -> None:
    stub = _tls_stub(pki, mutual=True)
    try:
        with RedpandaAdmin(
            stub.url, tls_verify=pki["ca"][0], tls_client_cert=pki["client"]
        ) as admin:
            assert len(admin.brokers()) == 1
        with (
            RedpandaAdmin(stub.url, tls_verify=pki["ca"][0], max_retries=0) as admin,
            pytest.raises(RedpandaAdminError) as err,
        ):
            admin.brokers()  # the server refuses a client without a certificate
        assert err.value.status is None
    finally:
        stub.stop()
    assert stub.violations == []
