"""The chain's building blocks: canonical JSON, record digests, signed checkpoints, keys."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from archive_chains import KEY, OTHER_KEY, SIGNED_AT, checkpoint_at, make_chain
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

from towline.archive.chain import (
    canonical,
    checkpoint_signed,
    load_private_key,
    load_public_key,
    public_key_pem,
    record_digest,
    sign_checkpoint,
)
from towline.archive.records import GENESIS_DIGEST, ArchiveError, format_time, parse_time


def test_canonical_json_is_rfc_8785_sorted_keys_no_whitespace_shortest_numbers() -> None:
    assert canonical({"b": [1.0, 2.5, 1e21], "a": "é", "c": None}) == '{"a":"é","b":[1,2.5,1e+21],"c":null}'.encode()


@pytest.mark.parametrize("value", [float("nan"), 2**53 + 1, {1: "x"}])
def test_what_json_cannot_carry_exactly_is_refused_with_the_reason(value: object) -> None:
    with pytest.raises(ArchiveError, match="not canonical JSON"):
        canonical({"field": value})  # type: ignore[dict-item]


def test_a_record_digest_is_sha256_over_the_previous_digest_and_the_canonical_record() -> None:
    body = {"status": {"phase": "Succeeded"}, "metadata": {"name": "r"}}
    content = {"kind": "run", "key": "u1", "namespace": "ns", "seq": 1, "recordedAt": SIGNED_AT, "body": body}
    expected = hashlib.sha256(bytes(32) + canonical(content)).hexdigest()
    assert record_digest(GENESIS_DIGEST, namespace="ns", seq=1, kind="run", key="u1", recorded_at=SIGNED_AT,
                         body=body) == expected


@pytest.mark.parametrize("field", ["namespace", "seq", "kind", "key", "recorded_at", "body", "prev"])
def test_every_field_of_a_record_changes_its_digest(field: str) -> None:
    args: dict[str, object] = {"namespace": "ns", "seq": 3, "kind": "run", "key": "u", "recorded_at": SIGNED_AT,
                               "body": {"a": 1}}
    prev = GENESIS_DIGEST
    original = record_digest(prev, **args)  # type: ignore[arg-type]
    changed = {"namespace": "other", "seq": 4, "kind": "approval", "key": "v",
               "recorded_at": "2025-07-01T08:00:01.000000Z", "body": {"a": 2}}
    if field == "prev":
        prev = "1" * 64
    else:
        args[field] = changed[field]
    assert record_digest(prev, **args) != original  # type: ignore[arg-type]


def test_a_checkpoint_verifies_with_the_public_key_alone_and_with_no_other() -> None:
    (entry,) = make_chain(1)
    checkpoint = checkpoint_at(entry)
    public = load_public_key(public_key_pem(KEY))
    assert checkpoint_signed(checkpoint, public)
    assert not checkpoint_signed(checkpoint, OTHER_KEY.public_key())


@pytest.mark.parametrize("change", [{"seq": 2}, {"head_digest": "1" * 64}, {"namespace": "other"},
                                    {"signed_at": "2025-07-02T08:00:00.000000Z"}, {"signature": "00" * 64},
                                    {"signature": "not hex"}])
def test_a_checkpoint_changed_in_any_field_no_longer_verifies(change: dict[str, object]) -> None:
    (entry,) = make_chain(1)
    assert not checkpoint_signed(replace(checkpoint_at(entry), **change), KEY.public_key())  # type: ignore[arg-type]


def test_signing_refuses_a_head_that_is_not_a_digest_and_a_time_in_another_form() -> None:
    with pytest.raises(ArchiveError, match="headDigest"):
        sign_checkpoint(KEY, "ns", 1, "abc", SIGNED_AT)
    with pytest.raises(ArchiveError, match="signedAt"):
        sign_checkpoint(KEY, "ns", 1, GENESIS_DIGEST, "2025-07-01T08:00:00Z")


def test_keys_load_from_pem_and_other_keys_are_refused_naming_the_fix() -> None:
    pem = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    assert load_private_key(pem).public_key() == KEY.public_key()
    ec_key = generate_private_key(SECP256R1())
    ec_pem = ec_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    with pytest.raises(ArchiveError, match="Ed25519"):
        load_private_key(ec_pem)
    with pytest.raises(ArchiveError, match="openssl genpkey"):
        load_private_key(b"not a key")
    with pytest.raises(ArchiveError, match="pubout"):
        load_public_key(b"not a key")
    with pytest.raises(ArchiveError, match="must be an Ed25519 public key"):
        load_public_key(ec_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))


def test_one_instant_has_one_spelling_whatever_the_time_zone_it_came_in() -> None:
    moment = datetime(2025, 7, 1, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(moment) == "2025-07-01T08:00:00.000000Z"
    assert parse_time(format_time(moment), "x") == moment.astimezone(UTC)
    with pytest.raises(ArchiveError, match="no time zone"):
        format_time(datetime(2025, 7, 1))
