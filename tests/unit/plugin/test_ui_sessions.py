"""The in-cluster web view's sessions, logins in progress and return paths (towline.plugin.ui.sessions)."""

from __future__ import annotations

import pytest

from towline.plugin.ui.sessions import PendingLogins, SessionStore, safe_return_path


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _store(clock: Clock) -> SessionStore:
    return SessionStore(clock, idle_seconds=60, absolute_seconds=600)


def _open(store: SessionStore, clock: Clock, token_seconds: float = 3600):
    return store.open(user="bob", groups=("approvers",), id_token="token", token_expires=clock.now + token_seconds)


def test_a_session_is_found_by_its_id_and_by_nothing_else() -> None:
    clock = Clock()
    store = _store(clock)
    session = _open(store, clock)
    assert store.find(session.id) is session
    assert store.find(session.id[:-1] + ("A" if session.id[-1] != "A" else "B")) is None
    assert store.find("") is None and store.find(None) is None
    assert session.csrf != session.id and len(session.id) >= 43, "256 random bits, apart from the CSRF token"


def test_an_id_that_logged_out_opens_nothing() -> None:
    clock = Clock()
    store = _store(clock)
    session = _open(store, clock)
    assert store.end(session.id)
    assert store.find(session.id) is None
    assert not store.end(session.id)


def test_a_session_idle_past_its_limit_ends_and_each_request_restarts_the_idle_time() -> None:
    clock = Clock()
    store = _store(clock)
    session = _open(store, clock)
    clock.now += 59
    assert store.find(session.id) is session
    clock.now += 59
    assert store.find(session.id) is session, "the request before restarted the idle time"
    clock.now += 60
    assert store.find(session.id) is None
    clock.now -= 30
    assert store.find(session.id) is None, "an ended session stays ended"


def test_a_busy_session_still_ends_at_its_absolute_limit() -> None:
    clock = Clock()
    store = _store(clock)
    session = _open(store, clock)
    for _ in range(19):
        clock.now += 30
        assert store.find(session.id) is session
    clock.now += 30
    assert store.find(session.id) is None


def test_a_session_ends_when_its_id_token_expires() -> None:
    clock = Clock()
    store = _store(clock)
    session = _open(store, clock, token_seconds=45)
    clock.now += 44
    assert store.find(session.id) is session
    clock.now += 1
    assert store.find(session.id) is None


def test_a_login_state_is_taken_once_and_only_while_fresh() -> None:
    clock = Clock()
    logins = PendingLogins(clock, seconds=600)
    first, second = logins.start("/ns/team/approvals/a"), logins.start("/runs")
    assert first.state != second.state and first.nonce != first.state and first.verifier not in (first.state,)
    assert logins.take(first.state) == first
    assert logins.take(first.state) is None, "a replayed callback finds nothing"
    clock.now += 600
    assert logins.take(second.state) is None
    assert logins.take(None) is None and logins.take("made-up") is None


def test_pending_logins_are_bounded() -> None:
    logins = PendingLogins(Clock(), limit=3)
    states = [logins.start("/").state for _ in range(5)]
    assert logins.take(states[0]) is None and logins.take(states[1]) is None
    assert logins.take(states[4]) is not None


@pytest.mark.parametrize("path", ["/ns/team/approvals/close-review", "/runs?workflow=a&phase=Failed", "/"])
def test_a_same_origin_path_is_where_the_browser_returns(path: str) -> None:
    assert safe_return_path(path) == path


@pytest.mark.parametrize("target", [
    "https://evil.example/", "//evil.example/x", "/\\evil.example", "\\\\evil.example", "http:/evil.example",
    "javascript:alert(1)", "evil.example", "/ns/team\r\nSet-Cookie: x=1", "/\t/evil.example", "", None,
    "/%5Cevil.example\\x", "///evil.example",
])
def test_any_other_return_address_goes_to_the_start_page(target: str | None) -> None:
    assert safe_return_path(target) == "/"


def test_an_open_stream_asks_whether_its_session_lasts_without_keeping_it_alive() -> None:
    clock = Clock()
    store = _store(clock)
    session = _open(store, clock)
    clock.now += 30
    assert store.lasts(session.id)
    clock.now += 30
    assert not store.lasts(session.id), "asking did not restart the idle time"
    ended = _open(store, clock)
    store.end(ended.id)
    assert not store.lasts(ended.id)
