"""The plugin reads kubeconfig as kubectl does ($KUBECONFIG a:b merged, first value wins) and turns every
failure into one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from towline.k8s import kubeconfig
from towline.k8s.client import ApiError, ApiUnavailable
from towline.plugin import errors
from towline.plugin.cli import main
from towline.plugin.commands import NotFound

BIN = Path(sys.executable).parent


def config(current: str | None, contexts: dict[str, tuple[str, str]], server: str) -> dict[str, Any]:
    """A kubeconfig whose contexts map name -> (cluster, namespace); every cluster here points at `server`."""
    clusters = sorted({cluster for cluster, _ in contexts.values()})
    document: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": server, "insecure-skip-tls-verify": True}} for c in clusters],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": cluster, "user": "u", "namespace": ns}}
                     for name, (cluster, ns) in contexts.items()],
    }
    if current:
        document["current-context"] = current
    return document


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


async def host_of(path: str | None, context: str | None) -> str:
    return (await kubeconfig.load(path, context)).server


def test_merged_kubeconfig_paths_read_like_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(tmp_path / "a", config("team-a", {"team-a": ("one", "ns-a"), "shared": ("one", "ns-first")},
                                         "https://10.0.0.1:6443"))
    second = write(tmp_path / "b", config("team-b", {"team-b": ("two", "ns-b"), "shared": ("two", "ns-second")},
                                          "https://10.0.0.2:6443"))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    # The first file's current-context wins (the client library alone would keep the last one's).
    assert kubeconfig.namespace(None, None) == "ns-a"
    assert asyncio.run(host_of(None, None)) == "https://10.0.0.1:6443"
    # A context only the second file defines is found, with its own cluster.
    assert kubeconfig.namespace(None, "team-b") == "ns-b"
    assert asyncio.run(host_of(None, "team-b")) == "https://10.0.0.2:6443"
    # A name both define: the first definition wins.
    assert kubeconfig.namespace(None, "shared") == "ns-first"
    # --kubeconfig names exactly one file: no merging.
    assert kubeconfig.namespace(str(second), None) == "ns-b"
    with pytest.raises(kubeconfig.KubeconfigProblem, match="--context team-a: no such context"):
        kubeconfig.namespace(str(second), "team-a")
    # With no current-context in the first file, the next file's is used.
    write(first, config(None, {"team-a": ("one", "ns-a")}, "https://10.0.0.1:6443"))
    assert kubeconfig.namespace(None, None) == "ns-b"


def test_no_kubeconfig_is_one_line_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    assert main(["runs"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: no kubeconfig found at $KUBECONFIG ({tmp_path / 'nowhere'}); set KUBECONFIG or pass " \
                  "--kubeconfig FILE\n"
    assert main(["--kubeconfig", str(tmp_path / "nope"), "status", "x"]) == 1
    assert capsys.readouterr().err == f"error: --kubeconfig {tmp_path / 'nope'}: no such file\n"


def test_an_unreachable_api_server_is_one_line_and_version_still_answers(tmp_path: Path) -> None:
    """A real process against a port nothing listens on (connection refused) and a name that does not resolve."""
    refused = write(tmp_path / "refused", config("x", {"x": ("c", "team")}, "https://127.0.0.1:1"))
    unknown = write(tmp_path / "dns", config("x", {"x": ("c", "team")}, "https://no-such-host.invalid:6443"))
    for path, cause in ((refused, "Connect call failed"), (unknown, "no-such-host.invalid")):
        result = subprocess.run([str(BIN / "kubectl-towline"), "--kubeconfig", str(path), "runs"],
                                capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: cannot reach the API server") and cause in result.stderr
    version = subprocess.run([str(BIN / "kubectl-towline"), "--kubeconfig", str(refused), "version"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert version.returncode == 0, version.stderr
    lines = version.stdout.splitlines()
    assert lines[0].startswith("Client (kubectl-towline): 0.") and lines[1].startswith("Server: not reachable")


def test_forbidden_names_the_verb_and_resource_and_says_rbac() -> None:
    refusal = ApiError(403, 'workflowruns.towline.dev is forbidden: User "alice" cannot list resource '
                            '"workflowruns" in API group "towline.dev" in the namespace "team-b"')
    line, code = errors.message(refusal)
    assert code == 1 and line.startswith(
        "error: forbidden: you may not list workflowruns.towline.dev in namespace team-b; your user lacks the "
        "RBAC permission")
    cluster_wide = ApiError(403, 'deployments.apps is forbidden: User "bob" cannot list resource "deployments" '
                                 'in API group "apps" at the cluster scope')
    assert "you may not list deployments.apps cluster-wide" in errors.message(cluster_wide)[0]
    policy = ApiError(403, "ValidatingAdmissionPolicy 'x' denied request: bob is not an allowed approver")
    assert errors.message(policy)[0] == ("error: forbidden (403): ValidatingAdmissionPolicy 'x' denied request: "
                                         "bob is not an allowed approver")


def test_every_failure_is_one_line_with_its_exit_code() -> None:
    printed: list[str] = []

    def fails(error: BaseException) -> int:
        def call() -> int:
            raise error
        return errors.guarded(call, printed.append)

    assert fails(KeyboardInterrupt()) == 130 and printed[-1] == "interrupted"
    assert fails(NotFound("no WorkflowRun 'x' in namespace team")) == 1
    assert fails(ApiError(404, "workflowruns.towline.dev \"x\" not found")) == 1
    assert printed[-1] == 'error: not found (404): workflowruns.towline.dev "x" not found'
    assert fails(ApiUnavailable(OSError("line one\nline two"))) == 1
    assert fails(RuntimeError("a bug\nover lines")) == 1
    assert printed[-1].startswith("error: unexpected RuntimeError: a bug over lines")
    assert all("\n" not in line for line in printed)


def test_ctrl_c_while_waiting_for_the_api_server_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """The server here accepts the connection and never answers; once the plugin is connected (the fact the
    test waits on), SIGINT arrives as a person's Ctrl-C would."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        path = write(tmp_path / "silent", config("x", {"x": ("c", "team")}, f"https://127.0.0.1:{port}"))
        process = subprocess.Popen([str(BIN / "kubectl-towline"), "--kubeconfig", str(path), "runs"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            server.settimeout(60)
            connection, _ = server.accept()
            with connection:
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert (process.returncode, out, err) == (130, "", "interrupted\n")
