"""The SSRF guard, exercised through http.request against a live loopback server.

Loopback targets use the live server's port, so if the guard let one through
the request would really succeed: an empty request log proves the refusal.
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest
from connector_testkit import (
    LOOPBACK_RULES,
    LoopbackHTTPServer,
    Reply,
    make_ctx,
    output_of,
    redirecting_connector,
    run_action,
)

from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.netguard import (
    DestinationRefusedError,
    NetGuard,
    NetworkRules,
    host_matches,
    opt_in_problem,
    parse_ip_host,
    refusal_reason,
)

PORT = "{port}"  # replaced by the live server's port

# Names a test resolver maps; nothing else resolves.
HOSTS = {
    "localhost": ["127.0.0.1"],
    "internal.example.com": ["10.1.2.3"],
    "rebind.example.com": ["127.0.0.1"],
    "mixed.example.com": ["93.184.216.34", "10.0.0.5"],
    "mapped.example.com": ["::ffff:169.254.169.254"],
    "v6-local.example.com": ["fe80::1"],
    "cgnat.example.com": ["100.64.12.1"],
}

REFUSED_URLS = [
    "http://127.0.0.1:{port}/",
    "http://localhost:{port}/",
    "http://2130706433:{port}/",  # decimal
    "http://0x7f000001:{port}/",  # hex
    "http://0177.0.0.1:{port}/",  # octal
    "http://017700000001:{port}/",  # octal, one number
    "http://127.1:{port}/",  # short form
    "http://0x7f.1:{port}/",  # mixed short form
    "http://0x7f.0x0.0x0.0x1:{port}/",
    "http://127.0.0.1.:{port}/",  # trailing dot
    "http://[::1]:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",  # IPv4-mapped
    "http://[::ffff:7f00:1]:{port}/",  # IPv4-mapped, hex
    "http://[::127.0.0.1]:{port}/",  # IPv4-compatible
    "http://0.0.0.0:{port}/",
    "http://0:{port}/",
    "http://[::]:{port}/",
    "http://rebind.example.com:{port}/",  # a public-looking name resolving to loopback
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL./computeMetadata/v1/",
    "http://metadata/",
    "http://instance-data/latest/",
    "http://100.100.100.200/latest/meta-data/",  # Alibaba metadata
    "http://192.0.0.192/opc/v2/",  # Oracle metadata
    "http://100.64.0.1/",  # CGNAT
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://169.254.1.1/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://[fec0::1]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://198.18.0.1/",
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
    "http://[64:ff9b:1::a00:1]/",  # local-use NAT64 of 10.0.0.1
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2001::1]/",  # Teredo
    "http://1.2.3.4.5/",  # number-like but not an address: never handed to a resolver
    "http://internal.example.com/",  # public name -> private address
    "http://mixed.example.com/",  # one bad answer spoils the lot
    "http://mapped.example.com/",  # resolver answers in mapped form
    "http://v6-local.example.com/",
    "http://cgnat.example.com/",
]


@pytest.mark.parametrize("template", REFUSED_URLS)
def test_ssrf_guard_refuses(template: str, http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "reached")
    ctx = make_ctx(rules=NetworkRules(), hosts=HOSTS)
    with pytest.raises(ActionError) as caught:
        run_action("http.request", {"url": template.format(port=http_server.port)}, ctx)
    # httpx itself rejects some malformed literals as invalid URLs; either way nothing is sent.
    assert caught.value.error_class in (ErrorClass.PERMANENT, ErrorClass.VALIDATION)
    assert "refused" in caught.value.message or "not a valid URL" in caught.value.message
    assert http_server.requests == []


def test_table_has_at_least_thirty_cases() -> None:
    assert len(REFUSED_URLS) >= 30


def test_loopback_is_refused_without_opt_in(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "reached")
    with pytest.raises(ActionError, match="loopback address; a step may opt in"):
        run_action("http.request", {"url": http_server.url("/")}, make_ctx(rules=NetworkRules()))


def test_loopback_works_with_explicit_opt_in(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "reached")
    result = run_action("http.request", {"url": http_server.url("/")}, make_ctx(rules=LOOPBACK_RULES))
    assert output_of(result)["body"] == "reached"


def test_metadata_address_is_refused_even_when_everything_is_opted_in() -> None:
    everything = NetworkRules(allow_private=(ipaddress.ip_network("0.0.0.0/0"),))
    with pytest.raises(ActionError, match="cloud metadata address"):
        run_action("http.request", {"url": "http://169.254.169.254/"}, make_ctx(rules=everything))


def test_public_address_is_allowed_and_connected_by_validated_ip(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/ping"] = Reply(200, {"pong": True})
    seen: list[tuple[str, int]] = []
    ctx = make_ctx(
        rules=NetworkRules(),
        hosts={"api.example.com": ["93.184.216.34"]},
        connector=redirecting_connector(http_server.port, seen),
    )
    result = run_action("http.request", {"url": "http://api.example.com/v1/ping"}, ctx)
    assert output_of(result)["body"] == {"pong": True}
    assert seen == [("93.184.216.34", 80)]
    assert http_server.requests[0].headers["host"] == "api.example.com"


def test_documentation_address_counts_as_public(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "ok")
    seen: list[tuple[str, int]] = []
    ctx = make_ctx(
        rules=NetworkRules(),
        hosts={"crm.example.com": ["203.0.113.10"]},
        connector=redirecting_connector(http_server.port, seen),
    )
    run_action("http.request", {"url": "http://crm.example.com/"}, ctx)
    assert seen == [("203.0.113.10", 80)]


def test_name_is_resolved_once_so_a_second_answer_cannot_rebind(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "ok")
    answers = iter([["203.0.113.7"], ["127.0.0.1"]])
    calls: list[str] = []

    def flipping_resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    seen: list[tuple[str, int]] = []
    ctx = make_ctx(rules=NetworkRules(), connector=redirecting_connector(http_server.port, seen))
    ctx.guard = NetGuard(NetworkRules(), flipping_resolver)
    run_action("http.request", {"url": "http://api.example.com/"}, ctx)
    assert calls == ["api.example.com"]
    assert seen == [("203.0.113.7", 80)]


def test_redirect_from_allowed_host_to_private_address_is_refused(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/start"] = Reply(302, headers={"Location": "http://10.0.0.8/admin"})
    with pytest.raises(ActionError, match=r"refused to connect to 10\.0\.0\.8: private address"):
        run_action("http.request", {"url": http_server.url("/start")}, make_ctx())
    assert [r.path for r in http_server.requests] == ["/start"]


def test_redirect_to_metadata_in_mapped_form_is_refused(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/start"] = Reply(307, headers={"Location": "http://[::ffff:a9fe:a9fe]/latest/"})
    with pytest.raises(ActionError, match="cloud metadata address"):
        run_action("http.request", {"url": http_server.url("/start")}, make_ctx())


def test_redirect_to_a_host_outside_the_allowlist_is_refused(http_server: LoopbackHTTPServer) -> None:
    target = http_server.url("/elsewhere")  # same server, but by an address not on the list
    http_server.routes["/start"] = Reply(302, headers={"Location": target})
    rules = NetworkRules(allow_hosts=("api.example.test",), allow_private=LOOPBACK_RULES.allow_private)
    ctx = make_ctx(rules=rules, hosts={"api.example.test": ["127.0.0.1"]})
    url = http_server.url("/start", host="api.example.test")
    with pytest.raises(ActionError, match="not in this step's allowHosts"):
        run_action("http.request", {"url": url}, ctx)
    assert [r.path for r in http_server.requests] == ["/start"]


def test_allowlist_refuses_other_hosts_before_resolving() -> None:
    ctx = make_ctx(rules=NetworkRules(allow_hosts=("api.example.com",)), hosts={"evil.example.net": ["8.8.8.8"]})
    with pytest.raises(ActionError, match="not in this step's allowHosts"):
        run_action("http.request", {"url": "https://evil.example.net/"}, ctx)
    assert ctx.guard._resolver.calls == []  # type: ignore[attr-defined]


def test_proxy_environment_variables_are_ignored(
    http_server: LoopbackHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: a proxy here would fail
    http_server.routes["/"] = Reply(200, "direct")
    assert output_of(run_action("http.request", {"url": http_server.url("/")}, make_ctx()))["body"] == "direct"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("010.0.0.1", "8.0.0.1"),  # octal, as the C resolver reads it
        ("[::1]", "::1"),
        ("api.example.com", None),
        ("face.bad", None),  # hex-looking letters, but the last label is not a number
    ],
)
def test_ip_literals_are_read_in_every_notation(host: str, expected: str | None) -> None:
    address = parse_ip_host(host)
    assert (None if address is None else str(address)) == expected


def test_wildcard_allowlist_matches_subdomains_but_not_the_apex() -> None:
    assert host_matches("a.b.example.org", "*.example.org")
    assert not host_matches("example.org", "*.example.org")
    assert not host_matches("badexample.org", "*.example.org")
    assert host_matches("API.Example.com.", "api.example.com")


def test_opt_in_cidr_allows_only_that_range() -> None:
    rules = NetworkRules.from_json('{"allowPrivateCidrs": ["10.20.0.0/16"]}')
    assert refusal_reason(ipaddress.ip_address("10.20.1.1"), rules.allow_private) is None
    assert refusal_reason(ipaddress.ip_address("10.21.1.1"), rules.allow_private) == "private address"
    assert refusal_reason(ipaddress.ip_address("127.0.0.1"), rules.allow_private) == "loopback address"


@pytest.mark.parametrize(
    "text",
    ['["a"]', '{"allowHosts": "api.example.com"}', '{"allowPrivateCidrs": ["10.0.0.0/33"]}'],
)
def test_malformed_network_rules_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="TOWLINE_NETWORK"):
        NetworkRules.from_json(text)


def test_refusal_message_names_host_and_address() -> None:
    guard = NetGuard(NetworkRules(), lambda host, port: ["192.168.0.9"])
    with pytest.raises(DestinationRefusedError, match=r"printer\.example\.com \(192\.168\.0\.9\): private address"):
        guard.resolve("printer.example.com", 443)


@pytest.mark.parametrize(("answer", "reason"), [
    ("168.63.129.16", "cloud metadata address"),  # Azure WireServer
    ("64:ff9b:1::cb00:710a", "NAT64 local-use address"),  # local-use NAT64 of a public address
    ("64:ff9b:1::7f00:1", "NAT64 local-use address"),
])
def test_azure_wireserver_and_local_use_nat64_are_refused_even_when_opted_in(
    http_server: LoopbackHTTPServer, answer: str, reason: str
) -> None:
    # If the guard let the address through, the connector would reach the live loopback server.
    http_server.routes["/machine"] = Reply(200, "reached")
    seen: list[tuple[str, int]] = []
    rules = NetworkRules(allow_private=(ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("168.63.0.0/16")))
    ctx = make_ctx(rules=rules, hosts={"wire.example.com": [answer]},
                   connector=redirecting_connector(http_server.port, seen))
    with pytest.raises(ActionError, match=reason):
        run_action("http.request", {"url": "http://wire.example.com/machine"}, ctx)
    assert seen == [] and http_server.requests == []


@pytest.mark.parametrize("opt_in", ["::/0", "64:ff9b:1::/48", "64:ff9b::/32"])
@pytest.mark.parametrize("answer", ["64:ff9b:1::a9fe:a9fe", "64:ff9b:1::7f00:1"])
def test_no_opt_in_reaches_local_use_nat64(http_server: LoopbackHTTPServer, opt_in: str, answer: str) -> None:
    """`::/0` or the prefix itself once re-opened local-use NAT64, and 169.254.169.254 through its gateway."""
    http_server.routes["/latest/meta-data/"] = Reply(200, "reached")
    seen: list[tuple[str, int]] = []
    rules = NetworkRules(allow_private=(ipaddress.ip_network(opt_in),))
    ctx = make_ctx(rules=rules, hosts={"nat.example.com": [answer]},
                   connector=redirecting_connector(http_server.port, seen))
    with pytest.raises(ActionError, match="NAT64 local-use address") as refused:
        run_action("http.request", {"url": "http://nat.example.com/latest/meta-data/"}, ctx)
    assert "opt in" not in str(refused.value), "no opt-in reaches it, so none is suggested"
    assert seen == [] and http_server.requests == []


@pytest.mark.parametrize(("cidr", "problem"), [
    ("::/0", "too broad to opt into"),
    ("0.0.0.0/0", "too broad to opt into"),
    ("10.0.0.0/7", "prefixes shorter than /8 for IPv4"),
    ("::/6", "prefixes shorter than /7 for IPv6"),
    ("64:ff9b:1::/48", "64:ff9b:1::/48 overlaps 64:ff9b:1::/48, which no opt-in opens"),
    ("64:ff9b:1:5::/64", "overlaps 64:ff9b:1::/48"),
    ("::/7", "overlaps 64:ff9b:1::/48"),
])
def test_the_guard_refuses_an_opt_in_too_broad_or_never_opened(cidr: str, problem: str) -> None:
    """A run snapshot from before validation refused them still gets no such opt-in in its pod."""
    assert opt_in_problem(ipaddress.ip_network(cidr)) is not None
    with pytest.raises(ValueError, match=re.escape(problem)):
        NetworkRules.from_json(json.dumps({"allowPrivateCidrs": [cidr]}))


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "fc00::/7", "fd12:3456:789a::/48", "169.254.0.0/16"])
def test_private_ranges_up_to_the_documented_minimum_may_be_opted_into(cidr: str) -> None:
    assert opt_in_problem(ipaddress.ip_network(cidr)) is None
    assert NetworkRules.from_json(json.dumps({"allowPrivateCidrs": [cidr]})).allow_private


def test_well_known_nat64_of_a_public_address_stays_reachable(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "ok")
    seen: list[tuple[str, int]] = []
    ctx = make_ctx(rules=NetworkRules(), hosts={"v6.example.com": ["64:ff9b::cb00:710a"]},
                   connector=redirecting_connector(http_server.port, seen))
    run_action("http.request", {"url": "http://v6.example.com/"}, ctx)
    assert seen == [("64:ff9b::cb00:710a", 80)]
