"""`kubectl towline verify`: an archive export (or a live namespace's chain) checked with only the public key.

An auditor needs no cluster access for a file: the export carries the chain and its signed checkpoints, and the
public key comes from wherever the platform team published it (never from the file itself, which anybody could
re-sign). The answer names the first record that was changed, removed, inserted or reordered, or says how much the
signatures cover: records after the newest checkpoint are linked but not signed yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from towline.archive.chain import load_public_key
from towline.archive.exports import verify_export
from towline.archive.records import ArchiveError
from towline.archive.verification import VerifyResult

Say = Callable[[str], None]


def verify_lines(lines: Iterable[str], key_pem: bytes, out: Say, err: Say) -> int:
    """0: the chain verifies (what it covers said on `out`); 1: it does not (the first bad record on `err`)."""
    try:
        result = verify_export(lines, load_public_key(key_pem))
    except ArchiveError as error:
        err(f"error: {error}")
        return 1
    return report(result, out, err)


def report(result: VerifyResult, out: Say, err: Say) -> int:
    if result.ok:
        out(f"{result.namespace}: verified {result.records} records (seq {result.first_seq}-{result.head_seq}), "
            f"{result.checkpoints} signed checkpoints; signed through seq {result.signed_through}"
            + (f", {result.unsigned} newer records linked but not yet signed" if result.unsigned else ""))
        return 0
    problem = result.problem
    assert problem is not None
    named = f" ({problem.kind} {problem.key})" if problem.kind else ""
    err(f"{result.namespace}: does NOT verify: record {problem.seq}{named} {problem.what}: {problem.message}")
    err(f"the {result.records} records before it verified (signed through seq {result.signed_through})")
    return 1


def verify_file(path: str, key_path: str, out: Say, err: Say) -> int:
    try:
        key_pem = Path(key_path).read_bytes()
    except OSError as error:
        err(f"error: --key {key_path}: {error.strerror}; pass the archive's public key (PEM)")
        return 2
    try:
        with Path(path).open(encoding="utf-8") as lines:
            return verify_lines(lines, key_pem, out, err)
    except OSError as error:
        err(f"error: {path}: {error.strerror}")
        return 2
    except UnicodeDecodeError:
        err(f"error: {path}: not UTF-8 text; an export is JSON lines (kubectl towline export --archive NAMESPACE)")
        return 1
