"""An anonymous sender tries to take the ingress down for every tenant; other namespaces keep their 202s.

Attacks, over real sockets to a real `towline ingress`: bodies that never
finish (holding slots), bodies that drip (slow-loris), bodies as large as a
trigger allows (holding memory), and unsigned or stale deliveries with large
bodies (costing a read). The ingress shares its slots and its body bytes out
per namespace, cuts a body that falls behind a minimum rate, and refuses what
the headers alone condemn before it reads a byte of the body.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from tests.integration.ingress_support import (
    another_namespace,
    ingress,
    post,
    refusal,
    runs,
    signed_standard,
    signed_trigger,
)
from tests.integration.support import wait_for

from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

# exclusive: floods an ingress: the load would slow every other worker's tests.
pytestmark = [pytest.mark.integration, pytest.mark.exclusive]
__all__ = ["ingress"]

MIB = 1024 * 1024
BODY = b'{"order": "A-1"}'


@pytest.fixture(scope="module")
def shared_ingress(ingress: IngressProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngressProcess]:
    """4 deliveries at once, 2 per namespace; 4 MiB of bodies, 2 MiB per namespace; a body may trickle (1 B/s)
    for up to a minute, so a connection the test stalls holds its share for the whole test."""
    work = tmp_path_factory.mktemp("shared-ingress")
    process = IngressProcess(kubeconfig=ingress.kubeconfig, log_path=work / "ingress.log", max_in_flight=4,
                             namespace_in_flight=2, max_buffered_bytes=4 * MIB, namespace_buffered_bytes=2 * MIB,
                             min_body_rate=1, body_timeout=60).start()
    yield process
    process.stop()


@contextmanager
def stalled(ingress: IngressProcess, url: str, headers: dict[str, str], length: int,
            sent: bytes = b'{"pad": "') -> Iterator[socket.socket]:
    """A delivery whose head and first bytes arrive, and whose remaining body never does."""
    path = url.removeprefix(ingress.url)
    connection = socket.create_connection(("127.0.0.1", ingress.port), timeout=30)
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    connection.sendall(head.encode() + b"\r\n" + sent)
    try:
        yield connection
    finally:
        connection.close()


def held(ingress: IngressProcess, count: int) -> None:
    """Wait until the ingress's own gauge shows the stalled bodies' bytes taken (their slots are held)."""
    import httpx  # noqa: PLC0415

    def buffered() -> bool:
        text = httpx.get(f"{ingress.admin_url}/metrics", timeout=5).text
        line = next(line for line in text.splitlines() if line.startswith("towline_webhook_buffered_bytes "))
        return float(line.split()[1]) >= count
    wait_for(f"{count} bytes held by stalled deliveries", buffered, timeout=30, interval=0.05)


def test_one_namespaces_flood_takes_only_its_share_of_the_slots(
    towline_installed: ControlPlane, shared_ingress: IngressProcess, namespace: str,
) -> None:
    url_a, key_a = signed_trigger(towline_installed, shared_ingress, namespace, "flooded", maxBodyBytes=1024)
    with another_namespace(towline_installed, namespace, "b") as tenant_b, ExitStack() as flood:
        url_b, key_b = signed_trigger(towline_installed, shared_ingress, tenant_b, "quiet")
        for _ in range(2):
            flood.enter_context(stalled(shared_ingress, url_a, signed_standard(key_a, BODY), 1000))
        held(shared_ingress, 2000)

        third = post(url_a, BODY, signed_standard(key_a, BODY))
        assert third.status_code == 503 and refusal(third)["reason"] == "Busy", third.text
        other = post(url_b, BODY, signed_standard(key_b, BODY))
        assert other.status_code == 202, other.text
        assert len(runs(towline_installed, tenant_b)) == 1
    assert runs(towline_installed, namespace) == []


def test_large_bodies_take_only_a_namespaces_share_of_the_memory(
    towline_installed: ControlPlane, shared_ingress: IngressProcess, namespace: str,
) -> None:
    url_a, key_a = signed_trigger(towline_installed, shared_ingress, namespace, "big", maxBodyBytes=3 * MIB)
    with stalled(shared_ingress, url_a, signed_standard(key_a, BODY), 2 * MIB + 1) as over_share:
        answer = over_share.recv(4096).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 503") and "buffering" in answer, answer
    with (another_namespace(towline_installed, namespace, "b") as tenant_b,
          another_namespace(towline_installed, namespace, "c") as tenant_c):
        url_b, key_b = signed_trigger(towline_installed, shared_ingress, tenant_b, "big", maxBodyBytes=3 * MIB)
        url_c, key_c = signed_trigger(towline_installed, shared_ingress, tenant_c, "small")
        with ExitStack() as flood:
            flood.enter_context(stalled(shared_ingress, url_a, signed_standard(key_a, BODY), 2 * MIB))
            flood.enter_context(stalled(shared_ingress, url_b, signed_standard(key_b, BODY), 2 * MIB))
            held(shared_ingress, 4 * MIB)
            crowded = post(url_c, BODY, signed_standard(key_c, BODY))
            assert crowded.status_code == 503 and "buffering" in refusal(crowded)["message"], crowded.text
        wait_for("the budget back once the flood's connections closed",
                 lambda: post(url_c, BODY, signed_standard(key_c, BODY)).status_code == 202, timeout=30,
                 interval=0.2)


def test_a_dripping_body_is_cut_for_its_rate_long_before_the_body_timeout(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    """The default ingress: 8 KiB/s after the first second, 10 s in all. The drip keeps sending, one byte at a time,
    so only the rate can have cut it (the answer would otherwise be BodyTimeout)."""
    url, key = signed_trigger(towline_installed, ingress, namespace, "drip")
    with stalled(ingress, url, signed_standard(key, BODY), 100_000, sent=b"") as connection:
        connection.settimeout(0.1)
        answer = b""
        for _ in range(300):  # one byte every 0.1 s, for up to 30 s, until the ingress answers
            try:
                connection.sendall(b" ")
                answer = connection.recv(4096)
                break
            except TimeoutError:
                continue
            except OSError:
                break
    text = answer.decode(errors="replace")
    assert text.startswith("HTTP/1.1 408"), text
    assert "BodyTooSlow" in text and "8192 bytes a second" in text
    assert runs(towline_installed, namespace) == []


@pytest.mark.parametrize("problem", ["stale timestamp", "no signature"])
def test_a_delivery_its_headers_condemn_is_refused_before_its_body_is_read(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, problem: str,
) -> None:
    """A 1 MiB body is announced and never sent; the 401 comes anyway, so the body was never waited for."""
    url, key = signed_trigger(towline_installed, ingress, namespace, "early", maxBodyBytes=2 * MIB)
    headers = signed_standard(key, BODY, at=time.time() - 3600)
    if problem == "no signature":
        headers = {"Content-Type": "application/json"}
    with stalled(ingress, url, headers, MIB, sent=b"") as connection:
        text = connection.recv(4096).decode(errors="replace")
    assert text.startswith("HTTP/1.1 401"), text
