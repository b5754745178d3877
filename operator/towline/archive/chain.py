"""The hash chain and its signed checkpoints. Pure: no I/O, no clock (times are arguments).

Each namespace's records form one chain. A record's digest is

    SHA-256( bytes.fromhex(prev_digest) || RFC8785({kind, key, namespace, seq, recordedAt, body}) )

so a record cannot be changed, moved to another position (its seq is covered) or to another namespace
without its digest changing, and every later record links to it. Digests alone prove nothing to someone
who can write the database (they can recompute them), so the archive signs checkpoints: Ed25519 over the
canonical JSON of {format, namespace, seq, headDigest, signedAt}. `seq` is also the count of records the
chain ever held (it starts at 1 and has no holes). Whoever holds only the public key can check both.

A chain whose oldest records were pruned starts right after a signed checkpoint (the anchor) whose head
digest is the last pruned record's, and the `prune` record that did it carries that anchor in its body.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from towline.archive.records import (
    ArchiveError,
    Entry,
    JSONObject,
    JSONValue,
    check_digest,
    parse_time,
)

CHECKPOINT_FORMAT = "towline.dev/archive-checkpoint/v1"
"""Inside every signed message: a signature over a checkpoint can never be replayed as anything else."""


def canonical(value: JSONValue) -> bytes:
    """RFC 8785 canonical JSON: what the digests and signatures cover. Raises ArchiveError for what JSON
    cannot carry exactly (NaN, integers beyond 2^53, non-string keys)."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as error:
        raise ArchiveError(f"the record is not canonical JSON ({error}); integers must fit in 53 bits, "
                           "floats must be finite and keys must be strings") from error


def record_digest(
    prev_digest: str, *, namespace: str, seq: int, kind: str, key: str, recorded_at: str, body: JSONObject,
) -> str:
    """The hex SHA-256 digest of one record, linked to the record before it by `prev_digest`."""
    check_digest(prev_digest, "prevDigest")
    content: JSONObject = {"kind": kind, "key": key, "namespace": namespace, "seq": seq,
                           "recordedAt": recorded_at, "body": body}
    return hashlib.sha256(bytes.fromhex(prev_digest) + canonical(content)).hexdigest()


def entry_digest(entry: Entry, *, namespace: str | None = None, seq: int | None = None) -> str:
    """An entry's digest recomputed from its fields; `namespace`/`seq` ask what it would be at another place.

    An entry whose stored prev digest is not hex is given a digest nothing matches."""
    try:
        return record_digest(entry.prev_digest, namespace=entry.namespace if namespace is None else namespace,
                             seq=entry.seq if seq is None else seq, kind=entry.kind, key=entry.key,
                             recorded_at=entry.recorded_at, body=entry.body)
    except ArchiveError:
        return ""


def intact(entry: Entry, *, namespace: str | None = None, seq: int | None = None) -> bool:
    """Whether the entry's stored digest is its content's (at its own place, or at the one given)."""
    return entry_digest(entry, namespace=namespace, seq=seq) == entry.digest


@dataclass(frozen=True)
class Checkpoint:
    """A signed statement: namespace's chain held `seq` records, the last with digest `head_digest`."""

    namespace: str
    seq: int
    head_digest: str
    signed_at: str
    key_id: str
    signature: str
    """Hex Ed25519 signature over `checkpoint_message(...)`."""

    def to_json(self) -> JSONObject:
        return {"namespace": self.namespace, "seq": self.seq, "headDigest": self.head_digest,
                "signedAt": self.signed_at, "keyId": self.key_id, "signature": self.signature}

    @classmethod
    def from_json(cls, value: object, where: str) -> Checkpoint:
        if not isinstance(value, dict):
            raise ArchiveError(f"{where}: a checkpoint must be a JSON object")
        fields = {}
        for name in ("namespace", "headDigest", "signedAt", "keyId", "signature"):
            if not isinstance(value.get(name), str):
                raise ArchiveError(f"{where}: checkpoint {name} must be a string")
            fields[name] = cast(str, value[name])
        seq = value.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ArchiveError(f"{where}: checkpoint seq must be a non-negative integer")
        return cls(namespace=fields["namespace"], seq=seq, head_digest=fields["headDigest"],
                   signed_at=fields["signedAt"], key_id=fields["keyId"], signature=fields["signature"])


def checkpoint_message(namespace: str, seq: int, head_digest: str, signed_at: str) -> bytes:
    """The exact bytes a checkpoint's signature covers."""
    return canonical({"format": CHECKPOINT_FORMAT, "namespace": namespace, "seq": seq,
                      "headDigest": head_digest, "signedAt": signed_at})


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short name of a public key (the first 16 hex digits of SHA-256 over its raw bytes): which key signed."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign_checkpoint(
    private_key: Ed25519PrivateKey, namespace: str, seq: int, head_digest: str, signed_at: str,
) -> Checkpoint:
    """Sign the head of a namespace's chain (`signed_at` as `records.format_time` writes it)."""
    check_digest(head_digest, "headDigest")
    parse_time(signed_at, "signedAt")
    signature = private_key.sign(checkpoint_message(namespace, seq, head_digest, signed_at))
    return Checkpoint(namespace=namespace, seq=seq, head_digest=head_digest, signed_at=signed_at,
                      key_id=key_id(private_key.public_key()), signature=signature.hex())


def checkpoint_signed(checkpoint: Checkpoint, public_key: Ed25519PublicKey) -> bool:
    """Whether `public_key` signed exactly this checkpoint."""
    try:
        signature = bytes.fromhex(checkpoint.signature)
        message = checkpoint_message(checkpoint.namespace, checkpoint.seq, checkpoint.head_digest,
                                     checkpoint.signed_at)
        public_key.verify(signature, message)
    except (InvalidSignature, ValueError, ArchiveError):
        return False
    return True


def prune_body(anchor: Checkpoint, *, before: str, deleted: int) -> JSONObject:
    """The body of a `prune` record: records 1..anchor.seq (those recorded before `before`) were deleted;
    the anchor (signed) says what the last of them digested to, so the rest still verifies."""
    return {"throughSeq": anchor.seq, "headDigest": anchor.head_digest, "before": before, "deleted": deleted,
            "anchor": anchor.to_json()}


def prune_anchor(body: Mapping[str, object], where: str) -> Checkpoint:
    """The signed anchor a `prune` record carries, checked against the body's own fields."""
    anchor = Checkpoint.from_json(body.get("anchor"), f"{where} body.anchor")
    if anchor.seq != body.get("throughSeq") or anchor.head_digest != body.get("headDigest"):
        raise ArchiveError(f"{where}: the prune record's anchor does not match its throughSeq/headDigest")
    return anchor


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    """An Ed25519 private key from PEM (PKCS#8, unencrypted), or an ArchiveError saying what to give."""
    key = _parsed(lambda: serialization.load_pem_private_key(pem, password=None),
                  "the signing key is not an unencrypted PEM private key "
                  "(make one with `openssl genpkey -algorithm ed25519`)")
    if not isinstance(key, Ed25519PrivateKey):
        raise ArchiveError("the signing key must be an Ed25519 key (`openssl genpkey -algorithm ed25519`)")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM (SubjectPublicKeyInfo), or an ArchiveError saying what to give."""
    key = _parsed(lambda: serialization.load_pem_public_key(pem),
                  "the verification key is not a PEM public key "
                  "(derive it with `openssl pkey -in signing.pem -pubout`)")
    if not isinstance(key, Ed25519PublicKey):
        raise ArchiveError("the verification key must be an Ed25519 public key")
    return key


def _parsed(load: Callable[[], object], fix: str) -> object:
    """What `load` reads from a PEM; cryptography's ValueError or TypeError becomes an ArchiveError saying `fix`."""
    try:
        return load()
    except (ValueError, TypeError) as error:
        raise ArchiveError(fix) from error


def public_key_pem(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    """The PEM of the public half, which is all a verifier needs."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
