"""The web view's request guard: the one-time launch code, the session, Host (DNS rebinding) and Origin."""

from __future__ import annotations

from towline.plugin.ui import guard

PORT = 43117
OWN = {"Host": f"127.0.0.1:{PORT}"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refusal(method: str = "GET", path: str = "/runs", headers: dict[str, str] | None = None,
            signed_in: bool = True) -> str | None:
    return guard.refusal(method=method, path=path, headers=OWN if headers is None else headers, signed_in=signed_in,
                         port=PORT)


def opened(launch: guard.Launch, code: str | None, session: str | None = None) -> str:
    outcome = launch.redeem(code, session)
    assert isinstance(outcome, guard.Opened), outcome
    assert outcome.session is not None
    return outcome.session


def test_the_code_opens_one_session_once() -> None:
    launch = guard.Launch(Clock())
    session = opened(launch, launch.code)
    assert launch.signed_in(session)
    assert session != launch.code
    assert not launch.signed_in(None) and not launch.signed_in(launch.code)


def test_a_replayed_code_is_refused_and_ends_the_session_it_opened() -> None:
    launch = guard.Launch(Clock())
    first = opened(launch, launch.code)  # say, a local user who read the code from the browser's command line
    refused = launch.redeem(launch.code, None)  # the person's browser, second
    assert isinstance(refused, str) and "already used" in refused
    assert not launch.signed_in(first), "the raced session is ended"
    assert isinstance(launch.redeem(launch.code, first), str), "and the code opens nothing any more"


def test_the_browser_that_holds_the_session_may_come_back_to_the_code_url() -> None:
    launch = guard.Launch(Clock())
    session = opened(launch, launch.code)
    assert launch.redeem(launch.code, session) == guard.Opened(None)
    assert launch.signed_in(session)


def test_an_unused_code_dies_after_its_time() -> None:
    clock = Clock()
    launch = guard.Launch(clock)
    clock.now += guard.CODE_SECONDS
    refused = launch.redeem(launch.code, None)
    assert isinstance(refused, str) and "expired" in refused


def test_a_wrong_or_missing_code_opens_nothing() -> None:
    launch = guard.Launch(Clock())
    wrong = launch.code[:-1] + ("A" if launch.code[-1] != "A" else "B")
    for code in (None, "", wrong):
        assert isinstance(launch.redeem(code, None), str)
    opened(launch, launch.code)  # a wrong guess does not use the code up


def test_each_launch_has_its_own_code() -> None:
    assert guard.Launch(Clock()).code != guard.Launch(Clock()).code
    assert len(guard.Launch(Clock()).code) >= 43


def test_each_port_has_its_own_cookie() -> None:
    assert guard.cookie_name(1) != guard.cookie_name(2)


def test_a_page_with_a_session_from_this_host_is_served() -> None:
    assert refusal() is None
    assert refusal(headers={"Host": f"localhost:{PORT}"}) is None


def test_a_request_without_a_session_is_refused() -> None:
    assert "no session" in (refusal(signed_in=False) or "")
    assert "no session" in (refusal(path="/events/runs", signed_in=False) or "")


def test_the_login_path_needs_no_session_but_still_this_host() -> None:
    assert refusal(path=guard.LOGIN_PATH, signed_in=False) is None
    assert "Host" in (refusal(path=guard.LOGIN_PATH, signed_in=False, headers={"Host": "evil.example"}) or "")


def test_a_rebound_host_name_is_refused_even_with_a_session() -> None:
    assert "Host" in (refusal(headers={"Host": f"attacker.example:{PORT}"}) or "")
    assert "Host" in (refusal(headers={"Host": "127.0.0.1:1"}) or "")
    assert "Host" in (refusal(headers={}) or "")


def test_a_foreign_origin_is_refused_even_with_a_session() -> None:
    assert "Origin" in (refusal(headers={**OWN, "Origin": "https://attacker.example"}) or "")
    assert "Origin" in (refusal(headers={**OWN, "Origin": "http://127.0.0.1:1"}) or "")
    assert "Origin" in (refusal(headers={**OWN, "Origin": "null"}) or "")
    assert refusal(headers={**OWN, "Origin": f"http://127.0.0.1:{PORT}"}) is None


def test_a_cross_site_fetch_is_refused() -> None:
    assert "cross-site" in (refusal(headers={**OWN, "Sec-Fetch-Site": "cross-site"}) or "")


def test_a_write_must_name_this_origin() -> None:
    assert "Origin" in (refusal(method="POST", path="/api/approvals/x") or "")
    assert refusal(method="POST", path="/api/approvals/x", headers={**OWN, "Origin": f"http://localhost:{PORT}"}) \
        is None


def test_static_assets_need_no_session_but_still_this_host() -> None:
    assert refusal(path="/static/app.js", signed_in=False) is None
    assert "Host" in (refusal(path="/static/app.js", signed_in=False, headers={"Host": "evil.example"}) or "")
