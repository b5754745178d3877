"""The web view's request guard: launch token, Host (DNS rebinding) and Origin (other sites)."""

from __future__ import annotations

from towline.plugin.ui import guard

PORT = 43117
TOKEN = guard.new_token()
OWN = {"Host": f"127.0.0.1:{PORT}"}


def refusal(method: str = "GET", path: str = "/runs", headers: dict[str, str] | None = None,
            token: str | None = TOKEN) -> str | None:
    return guard.refusal(method=method, path=path, headers=OWN if headers is None else headers, token=token,
                         expected_token=TOKEN, port=PORT)


def test_a_page_with_the_launch_token_from_this_host_is_served() -> None:
    assert refusal() is None
    assert refusal(headers={"Host": f"localhost:{PORT}"}) is None


def test_a_request_without_or_with_a_wrong_token_is_refused() -> None:
    assert "launch token" in (refusal(token=None) or "")
    assert "launch token" in (refusal(token=TOKEN[:-1] + ("A" if TOKEN[-1] != "A" else "B")) or "")


def test_a_rebound_host_name_is_refused_even_with_the_token() -> None:
    assert "Host" in (refusal(headers={"Host": f"attacker.example:{PORT}"}) or "")
    assert "Host" in (refusal(headers={"Host": "127.0.0.1:1"}) or "")
    assert "Host" in (refusal(headers={}) or "")


def test_a_foreign_origin_is_refused_even_with_the_token() -> None:
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


def test_static_assets_need_no_token_but_still_this_host() -> None:
    assert refusal(path="/static/app.js", token=None) is None
    assert "Host" in (refusal(path="/static/app.js", token=None, headers={"Host": "evil.example"}) or "")


def test_each_launch_has_its_own_token() -> None:
    assert guard.new_token() != guard.new_token()
    assert len(guard.new_token()) >= 43
