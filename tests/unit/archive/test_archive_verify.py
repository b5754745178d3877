"""verify() names the first record that was changed, removed, inserted or reordered, for any single such change
to a signed chain, whether made to the database's rows (seq columns renumbered or swapped) or to an export's
lines; and a pruned chain, anchored by a signed checkpoint, still verifies."""

from __future__ import annotations

from dataclasses import replace

import pytest
from archive_chains import KEY, NAMESPACE, OTHER_KEY, checkpoint_at, make_chain, make_entry, rehash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from towline.archive.chain import prune_body, sign_checkpoint
from towline.archive.records import Entry
from towline.archive.verification import VerifyResult, verify

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes = st.integers(min_value=2, max_value=12)


def check(entries: list[Entry], chain_head: Entry, *, first_seq: int = 1) -> VerifyResult:
    """Verify with one checkpoint signed at the original head (the archive signs at least every minute), from
    seq 1 (the store and an export's header say where the chain starts)."""
    return verify(NAMESPACE, entries, [checkpoint_at(chain_head)], KEY.public_key(), first_seq=first_seq)


def test_an_untouched_chain_verifies_and_says_how_much_a_signature_covers() -> None:
    chain = make_chain(5)
    result = verify(NAMESPACE, chain, [checkpoint_at(chain[2])], KEY.public_key())
    assert (result.ok, result.records, result.head_seq, result.signed_through, result.unsigned) == (True, 5, 5, 3, 2)
    assert result.head_digest == chain[-1].digest


@PROPERTY
@given(size=sizes, data=st.data(), rehashed=st.booleans())
def test_any_changed_record_is_named(size: int, data: st.DataObject, rehashed: bool) -> None:
    chain = make_chain(size)
    i = data.draw(st.integers(0, size - 1))
    changed = replace(chain[i], body={**chain[i].body, "status": {"phase": "Failed"}})
    tampered = [*chain[:i], rehash(changed) if rehashed else changed, *chain[i + 1:]]
    problem = check(tampered, chain[-1]).problem
    assert problem is not None
    assert (problem.what, problem.seq, problem.kind, problem.key) == ("changed", i + 1, "run", chain[i].key)


@PROPERTY
@given(size=sizes, data=st.data(), renumbered=st.booleans())
def test_any_removed_record_is_named_by_its_seq(size: int, data: st.DataObject, renumbered: bool) -> None:
    chain = make_chain(size)
    i = data.draw(st.integers(0, size - 1))
    rest = [replace(entry, seq=entry.seq - 1) for entry in chain[i + 1:]] if renumbered else chain[i + 1:]
    problem = check([*chain[:i], *rest], chain[-1]).problem
    assert problem is not None
    assert (problem.what, problem.seq) == ("removed", i + 1)


@PROPERTY
@given(size=sizes, data=st.data(), linked=st.booleans(), renumbered=st.booleans())
def test_any_inserted_record_is_named(size: int, data: st.DataObject, linked: bool, renumbered: bool) -> None:
    chain = make_chain(size)
    i = data.draw(st.integers(0, size - 1))
    prev = chain[i - 1].digest if linked and i > 0 else ("0" * 64 if linked else "ab" * 32)
    forged = make_entry(i + 1, prev, key="forged", body={"status": {"phase": "Succeeded"}, "forged": True})
    rest = [replace(entry, seq=entry.seq + 1) for entry in chain[i:]] if renumbered else chain[i:]
    problem = check([*chain[:i], forged, *rest], chain[-1]).problem
    assert problem is not None
    assert (problem.what, problem.seq, problem.key) == ("inserted", i + 1, "forged")


@PROPERTY
@given(size=sizes, data=st.data(), in_the_database=st.booleans())
def test_any_two_swapped_records_are_named(size: int, data: st.DataObject, in_the_database: bool) -> None:
    chain = make_chain(size)
    i, j = sorted(data.draw(st.lists(st.integers(0, size - 1), min_size=2, max_size=2, unique=True)))
    tampered = list(chain)
    if in_the_database:
        # Swap the rows' seq columns; the store reads them back ordered by seq.
        tampered[i], tampered[j] = replace(chain[j], seq=chain[i].seq), replace(chain[i], seq=chain[j].seq)
    else:
        tampered[i], tampered[j] = chain[j], chain[i]  # an export's lines swapped
    problem = check(tampered, chain[-1]).problem
    assert problem is not None
    assert (problem.what, problem.seq, problem.key) == ("reordered", i + 1, chain[j].key)


def test_records_forged_after_the_last_checkpoint_are_counted_as_unsigned() -> None:
    chain = make_chain(4)
    forged = make_entry(5, chain[-1].digest, key="forged")
    result = check([*chain, forged], chain[-1])
    assert result.ok and result.unsigned == 1 and result.signed_through == 4


def test_a_checkpoint_signed_by_another_key_or_for_another_namespace_fails_verification() -> None:
    chain = make_chain(3)
    foreign = checkpoint_at(chain[-1], OTHER_KEY)
    problem = verify(NAMESPACE, chain, [foreign], KEY.public_key()).problem
    assert problem is not None and problem.what == "bad-checkpoint"
    elsewhere = sign_checkpoint(KEY, "team-b", 3, chain[-1].digest, "2025-07-01T08:00:00.000000Z")
    problem = verify(NAMESPACE, chain, [elsewhere], KEY.public_key()).problem
    assert problem is not None and problem.what == "bad-checkpoint"


def test_a_chain_rewritten_from_a_record_on_fails_at_the_checkpoint_that_covered_it() -> None:
    chain = make_chain(6)
    rewritten, prev = list(chain[:2]), chain[1].digest
    for original in chain[2:]:
        entry = rehash(replace(original, prev_digest=prev, body={"rewritten": True}))
        rewritten.append(entry)
        prev = entry.digest
    problem = verify(NAMESPACE, rewritten, [checkpoint_at(chain[3]), checkpoint_at(chain[5])], KEY.public_key()).problem
    assert problem is not None and (problem.what, problem.seq) == ("changed", 4)


def pruned_chain() -> tuple[list[Entry], list]:  # type: ignore[type-arg]
    """Records 1-10 pruned: an anchor checkpoint at 10, records 11-14 kept, and the prune record at 15."""
    whole = make_chain(14)
    anchor = checkpoint_at(whole[9])
    kept = whole[10:]
    prune = make_entry(15, kept[-1].digest, kind="prune", key="10",
                       body=prune_body(anchor, before="2025-07-01T08:00:11.000000Z", deleted=10))
    return [*kept, prune], [anchor, checkpoint_at(prune)]


def test_a_pruned_chain_verifies_from_its_signed_anchor() -> None:
    entries, checkpoints = pruned_chain()
    result = verify(NAMESPACE, entries, checkpoints, KEY.public_key(), first_seq=11)
    assert result.ok and (result.first_seq, result.head_seq, result.unsigned) == (11, 15, 0)


def test_a_chain_cut_without_a_signed_anchor_names_the_records_removed() -> None:
    entries, checkpoints = pruned_chain()
    problem = verify(NAMESPACE, entries, checkpoints[1:], KEY.public_key(), first_seq=11).problem
    assert problem is not None and (problem.what, problem.seq) == ("removed", 1)


def test_a_prune_record_whose_anchor_was_forged_is_named() -> None:
    entries, checkpoints = pruned_chain()
    forged_anchor = sign_checkpoint(OTHER_KEY, NAMESPACE, 10, entries[0].prev_digest, "2025-07-01T08:00:00.000000Z")
    body = {**entries[-1].body, "anchor": forged_anchor.to_json()}
    entries[-1] = rehash(replace(entries[-1], body=body))
    problem = verify(NAMESPACE, entries, checkpoints[:1], KEY.public_key(), first_seq=11).problem
    assert problem is not None and (problem.what, problem.seq, problem.kind) == ("changed", 15, "prune")


@pytest.mark.parametrize("cut", [1, 3])
def test_records_cut_off_the_end_before_a_checkpoint_are_named(cut: int) -> None:
    chain = make_chain(5)
    problem = check(chain[:-cut], chain[-1]).problem
    assert problem is not None and (problem.what, problem.seq) == ("removed", 6 - cut)
