"""SASL by hand: the SaslHandshake / SaslAuthenticate bodies as bytes, PLAIN's token, and
SCRAM-SHA-256's client proof and server check against RFC 7677's example exchange."""

from __future__ import annotations

import pytest

from pipeline.coordinator.sasl import (
    AuthenticateAnswer,
    HandshakeAnswer,
    SaslError,
    ScramClient,
    decode_authenticate,
    decode_handshake,
    encode_authenticate,
    encode_handshake,
    plain_token,
)

# RFC 7677, section 3: user "user", password "pencil", 4096 iterations
RFC7677_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_matches_rfc_7677() -> None:
    scram = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_NONCE)
    assert scram.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert scram.final(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    scram.verify(RFC7677_SERVER_FINAL)  # the server proved it knows the password


def test_a_server_signature_that_does_not_match_is_refused() -> None:
    scram = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_NONCE)
    scram.final(RFC7677_SERVER_FIRST)
    with pytest.raises(SaslError, match="signature does not match"):
        scram.verify(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    with pytest.raises(SaslError, match="refused the login"):
        scram.verify(b"e=invalid-proof")


def test_a_server_nonce_not_extending_ours_is_refused() -> None:
    scram = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce="abc")
    with pytest.raises(SaslError, match="not RFC 5802"):
        scram.final(b"r=xyz123,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(SaslError, match="refused"):
        scram.final(b"e=unknown-user")


def test_scram_escapes_the_username_and_sha_512_proves_with_its_own_hash() -> None:
    scram = ScramClient("SCRAM-SHA-512", "a=b,c", "pw", nonce="n0")
    assert scram.first() == b"n,,n=a=3Db=2Cc,r=n0"
    final = scram.final(b"r=n0srv,s=c2FsdA==,i=1")
    proof = final.split(b",p=")[1]
    assert len(proof) == 88  # base64 of a 64-byte SHA-512 proof


def test_a_non_scram_mechanism_is_refused() -> None:
    with pytest.raises(ValueError, match="not a SCRAM"):
        ScramClient("PLAIN", "u", "p")


def test_plain_token() -> None:
    assert plain_token("alice", "s3cret") == b"\x00alice\x00s3cret"


def test_handshake_request_and_answers() -> None:
    assert encode_handshake("SCRAM-SHA-256") == b"\x00\x0dSCRAM-SHA-256"
    ok = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x05PLAIN"
    assert decode_handshake(ok) == HandshakeAnswer(0, ("PLAIN",))
    # UNSUPPORTED_SASL_MECHANISM (33), with the two the listener enables
    refused = b"\x00\x21" + b"\x00\x00\x00\x02" + b"\x00\x05PLAIN" + b"\x00\x0dSCRAM-SHA-512"
    assert decode_handshake(refused) == HandshakeAnswer(33, ("PLAIN", "SCRAM-SHA-512"))
    with pytest.raises(SaslError, match="mechanisms"):
        decode_handshake(b"\x00\x00\x00\x00\x00\x02\x00\x05PLAIN")


def test_authenticate_requests_classic_and_flexible() -> None:
    assert encode_authenticate(b"tok", 1) == b"\x00\x00\x00\x03tok"
    assert encode_authenticate(b"tok", 2) == b"\x04tok" + b"\x00"


def test_authenticate_answers_per_version() -> None:
    v0 = b"\x00\x00" + b"\xff\xff" + b"\x00\x00\x00\x02ok"
    assert decode_authenticate(v0, 0) == AuthenticateAnswer(0, None, b"ok", 0)
    v1 = b"\x00\x00" + b"\xff\xff" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00\x00\x00\x0e\x10"
    assert decode_authenticate(v1, 1) == AuthenticateAnswer(0, None, b"", 3600)
    # v2: SASL_AUTHENTICATION_FAILED (58), a message, null bytes, lifetime 0, no tags
    v2 = b"\x00\x3a" + b"\x04bad" + b"\x00" + b"\x00" * 8 + b"\x00"
    assert decode_authenticate(v2, 2) == AuthenticateAnswer(58, "bad", b"", 0)
    with pytest.raises(SaslError, match="session_lifetime_ms"):
        decode_authenticate(v2[:8], 2)
