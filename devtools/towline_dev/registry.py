"""A private OCI registry for the local node: password-protected, holding the release's images.

What a platform team's cluster pulls from, made small: the CNCF Distribution registry
(`registry`, github.com/distribution/distribution/v3) with htpasswd (bcrypt) basic auth over
HTTPS (a CA of its own, made fresh at each start), filled with `crane push`
(github.com/google/go-containerregistry), and the node's containerd told to trust it
(`trust_from`). containerd is given no credentials: it pulls only with the ones the kubelet
hands it from a pod's `imagePullSecrets`.

The tools are compiled once from the Go module proxy into the cache (`cache_root()`), at the
versions pinned here, as `towline_dev.binaries` builds the node's. The htpasswd line is made
by a small Go helper built with the registry against the registry's own bcrypt package
(golang.org/x/crypto/bcrypt at the version Distribution requires): Python's standard library
has no bcrypt, which is the only hash the registry accepts.

Development and test tooling only: it never talks to a registry other than the one it starts,
and never writes its password anywhere but that registry's state directory and what the caller
asks for (`docker_config`, for a pull secret).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization

from towline_dev.binaries import (
    BinariesUnavailable,
    _exclusive_lock,
    _go_env,
    _run_go,
    _stderr_progress,
    _wrapper_gomod,
    cache_root,
)
from towline_dev.certs import _ca, issue_leaf, write_key_pair
from towline_dev.processes import spawn, stop_process, wait_for
from towline_dev.versions import CRANE_VERSION, DISTRIBUTION_VERSION

Progress = Callable[[str], None]

TOOLS = ("registry", "htpasswd", "crane")

_HTPASSWD_MAIN = """\
// htpasswd: one "user:bcrypt-hash" line for the user named by the argument, the password
// read from standard input (never from the command line, which other users can see).
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	password, err := bufio.NewReader(os.Stdin).ReadString('\\n')
	if err != nil || len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: htpasswd USER < password-line")
		os.Exit(2)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimSuffix(password, "\\n")), bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\\n", os.Args[1], hash)
}
"""


class RegistryUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """The registry could not be built, started or filled; the message says why."""


@dataclass(frozen=True)
class RegistryTools:
    registry: Path
    htpasswd: Path
    crane: Path


def cached_tools_dir() -> Path:
    """Where the registry, the htpasswd helper and crane of the pinned versions live once built."""
    return cache_root() / f"distribution-{DISTRIBUTION_VERSION}_crane-{CRANE_VERSION}" / "bin"


def find_registry_tools(*, build: bool = True, progress: Progress = _stderr_progress) -> RegistryTools:
    """The pinned tools from the cache, built once from the Go module proxy if it lacks them."""
    directory = cached_tools_dir()
    tools = RegistryTools(*(directory / name for name in TOOLS))
    if all((directory / name).is_file() for name in TOOLS):
        return tools
    if not build:
        raise BinariesUnavailable(f"the registry tools are not built yet ({directory} lacks some of {TOOLS})")
    with _exclusive_lock(directory.parent / "build.lock"):
        missing = [name for name in TOOLS if not (directory / name).is_file()]
        if missing:
            _build_tools(missing, directory, progress)
    return tools


def _build_tools(missing: list[str], directory: Path, progress: Progress) -> None:
    go = shutil.which("go")
    if go is None:
        raise BinariesUnavailable(f"{', '.join(missing)} are not in {directory} and Go is not installed to build them")
    progress(f"registry tools: building {', '.join(missing)} (Distribution {DISTRIBUTION_VERSION}, crane "
             f"{CRANE_VERSION}) from the Go module proxy into {directory} (once per machine)")
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix="bin-", dir=directory.parent))
    try:
        if {"registry", "htpasswd"} & set(missing):
            _build_distribution(go, directory.parent / "src", staging, progress)
        if "crane" in missing:
            label = f"crane {CRANE_VERSION}"
            _run_go([go, "install", "-v", "-trimpath", "-ldflags", "-s -w",
                     f"github.com/google/go-containerregistry/cmd/crane@{CRANE_VERSION}"],
                    staging, progress, f"{label}: compiling",
                    env=_go_env(GOBIN=str(staging), GOFLAGS="-buildvcs=false"))
        directory.mkdir(parents=True, exist_ok=True)
        for name in missing:
            (staging / name).replace(directory / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"registry tools: built {', '.join(missing)} in {time.monotonic() - started:.0f} s")


def _build_distribution(go: str, work: Path, out: Path, progress: Progress) -> None:
    """The registry and the htpasswd helper, in one module whose only requirement is Distribution,
    so the helper's bcrypt is the very version the registry checks passwords with."""
    label = f"Distribution {DISTRIBUTION_VERSION}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "htpasswd").mkdir(parents=True)
    module = "github.com/distribution/distribution/v3"
    (work / "go.mod").write_text(
        _wrapper_gomod("towline.local/registry-tools", f"{module} {DISTRIBUTION_VERSION}", {}))
    (work / "go.sum").touch()
    (work / "htpasswd" / "main.go").write_text(_HTPASSWD_MAIN)
    _run_go([go, "get", f"{module}/cmd/registry@{DISTRIBUTION_VERSION}"], work, progress,
            f"{label}: resolving dependencies")
    ldflags = f"-s -w -X {module}/version.version={DISTRIBUTION_VERSION}"
    _run_go([go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/",
             f"{module}/cmd/registry", "./htpasswd"], work, progress, f"{label}: compiling")


# What the registry, containerd and a pull secret are told: pure, no I/O.

def registry_config(*, address: str, port: int, state_dir: Path, http_secret: str) -> dict[str, object]:
    """Distribution's configuration: TLS (its files in `state_dir`), htpasswd auth on every request,
    storage in `state_dir`, a log line per request naming the user (who pulled what).

    `http_secret` signs upload state between requests; one registry process, so any fresh value does."""
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(state_dir / "storage")}, "delete": {"enabled": True}},
        "http": {
            "addr": f"{address}:{port}",
            "secret": http_secret,
            "tls": {"certificate": str(state_dir / "registry.crt"), "key": str(state_dir / "registry.key")},
        },
        "auth": {"htpasswd": {"realm": "towline-test-registry", "path": str(state_dir / "htpasswd")}},
    }


def containerd_hosts_toml(host: str, ca_file: Path) -> str:
    """containerd's hosts.toml for `host` (address:port): HTTPS, trusting only `ca_file`, pull and resolve.
    No credentials: containerd pulls with those the kubelet passes from a pod's imagePullSecrets."""
    # The top-level keys configure `server` itself (no [host."..."] mirror tables: nothing else to try).
    return "\n".join([
        f"server = {json.dumps(f'https://{host}')}",
        'capabilities = ["pull", "resolve"]',
        f"ca = {json.dumps(str(ca_file))}",
        "",
    ])


def docker_config(host: str, username: str, password: str) -> dict[str, object]:
    """A `.dockerconfigjson` (what `kubectl create secret docker-registry` writes, and crane reads)."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {host: {"username": username, "password": password, "auth": token}}}


def pull_secret(name: str, namespace: str, config: dict[str, object]) -> dict[str, object]:
    """A kubernetes.io/dockerconfigjson Secret holding `config`."""
    encoded = base64.b64encode(json.dumps(config).encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": namespace}, "data": {".dockerconfigjson": encoded}}


def free_port(address: str) -> int:
    """A TCP port on `address` that was free a moment ago (the registry binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class PushedImage:
    repository: str
    """host:port/name, as a pod's image names it."""
    tag: str
    digest: str
    """The manifest's digest, as the registry serves it (and a container's imageID names it)."""

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"


class LocalRegistry:
    """A Distribution registry serving HTTPS on `address` with a CA of its own, one user in htpasswd.

    `start()`, `push()` images into it, `trust_from()` a node's containerd, hand pods
    `docker_config()` in a pull secret, `stop()`. Everything it writes is in `state_dir`.
    """

    def __init__(self, state_dir: Path, *, address: str, tools: RegistryTools | None = None,
                 username: str = "towline-puller", progress: Progress = _stderr_progress) -> None:
        self.state_dir = state_dir
        self.address = address
        self.username = username
        self.password = secrets.token_urlsafe(24)
        self._tools = tools
        self._progress = progress
        self._process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def host(self) -> str:
        if self.port is None:
            raise RuntimeError("the registry is not started")
        return f"{self.address}:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "ca.crt"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "registry.log"

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> LocalRegistry:
        tools = self._tools = self._tools or find_registry_tools(progress=self._progress)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.address)
        _write_tls(self.state_dir, self.address)
        (self.state_dir / "htpasswd").write_text(_htpasswd_line(tools.htpasswd, self.username, self.password))
        (self.state_dir / "htpasswd").chmod(0o600)
        config = self.state_dir / "config.yml"
        settings = registry_config(address=self.address, port=self.port, state_dir=self.state_dir,
                                   http_secret=secrets.token_hex(16))
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        # Distribution v3 exports traces over OTLP unless told not to; nothing here collects them.
        env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}
        self._process = spawn([tools.registry, "serve", config], log_path=self.log_path, env=env,
                              cwd=self.state_dir)

        def challenges() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RegistryUnavailable(f"the registry exited with status {self._process.returncode}:\n"
                                          f"{self.log_path.read_text(errors='replace')[-3000:]}")
            return self.status("/v2/") == 401

        try:
            wait_for(challenges, timeout=timeout, interval=0.1, what=f"the registry to serve on {self.host}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process, grace_seconds=5.0)
            self._process = None

    def status(self, path: str, *, authenticated: bool = False) -> int:
        """The HTTP status of GET `path`, over TLS checked against the registry's CA."""
        request = urllib.request.Request(f"https://{self.host}{path}")
        if authenticated:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl_context(self.ca_file)
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:  # noqa: S310 - https only
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, OSError):
            return 0

    def docker_config(self) -> dict[str, object]:
        return docker_config(self.host, self.username, self.password)

    def push(self, archive: Path, name: str, tag: str) -> PushedImage:
        """Push the image of an OCI archive (a tar of an OCI layout) as `name:tag` with crane."""
        tools = self._tools or find_registry_tools(progress=self._progress)
        repository = f"{self.host}/{name}"
        with tempfile.TemporaryDirectory(prefix="push-", dir=self.state_dir) as scratch:
            # crane reads a directory as an OCI layout, a file only as a docker-save tarball.
            layout = Path(scratch) / "layout"
            with tarfile.open(archive) as tar:
                tar.extractall(layout, filter="data")
            docker_dir = Path(scratch) / "docker"
            docker_dir.mkdir()
            (docker_dir / "config.json").write_text(json.dumps(self.docker_config()))
            env = {**os.environ, "DOCKER_CONFIG": str(docker_dir), "SSL_CERT_FILE": str(self.ca_file)}
            result = subprocess.run([str(tools.crane), "push", str(layout), f"{repository}:{tag}"],
                                    capture_output=True, text=True, env=env, timeout=600, check=False)
        if result.returncode != 0:
            raise RegistryUnavailable(f"crane push {archive.name} {repository}:{tag} failed:\n{result.stderr}")
        pushed = result.stdout.strip().splitlines()[-1]
        pushed_repository, _, digest = pushed.partition("@")
        if pushed_repository != repository or not digest.startswith("sha256:"):
            raise RegistryUnavailable(f"crane push printed {pushed!r}, not {repository}@sha256:...")
        return PushedImage(repository, tag, digest)

    def trust_from(self, hosts_dir: Path) -> Path:
        """Tell the containerd whose `config_path` is `hosts_dir` to reach this registry over HTTPS,
        trusting its CA (read at each pull: no restart). Returns the directory to remove afterwards."""
        directory = hosts_dir / self.host
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.ca_file, directory / "ca.crt")
        (directory / "hosts.toml").write_text(containerd_hosts_toml(self.host, directory / "ca.crt"))
        return directory

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def fetched_by_containerd(self, user: str, methods: tuple[str, ...] = ("GET",)) -> set[str]:
        """The URIs this registry answered 200 to a containerd (a node pulling) authenticated as `user`."""
        return fetched_by_containerd(self.log_text(), user, methods)

    def fetched_by_helm(self, user: str, methods: tuple[str, ...] = ("GET",)) -> set[str]:
        """The URIs this registry answered 200 to helm (pulling a chart) authenticated as `user`."""
        return fetched_by(self.log_text(), user, methods, agent="Helm/")


# Distribution logs one "response completed" line per request, its fields sorted by name (logrus), a value
# holding ':' (a digest in a URI, the user agent) quoted.
_FIELD = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S+)')


def fetched_by_containerd(log: str, user: str, methods: tuple[str, ...] = ("GET",)) -> set[str]:
    """The URIs a registry log shows answered 200 to `methods` from containerd authenticated as `user`.

    The user agent tells the node's pulls from a push tool's reads (crane and skopeo log in as the same user).
    """
    return fetched_by(log, user, methods, agent="containerd/")


def fetched_by(log: str, user: str, methods: tuple[str, ...], *, agent: str) -> set[str]:
    """The URIs a registry log shows answered 200 to `methods` from a client whose user agent starts with
    `agent`, authenticated as `user`."""
    fetched = set()
    for line in log.splitlines():
        fields = {key: value.strip('"') for key, value in _FIELD.findall(line)}
        if (fields.get("msg") == "response completed" and fields.get("auth.user.name") == user
                and fields.get("http.request.useragent", "").startswith(agent)
                and fields.get("http.request.method") in methods and fields.get("http.response.status") == "200"):
            fetched.add(fields["http.request.uri"])
    return fetched


def ssl_context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def _write_tls(directory: Path, address: str) -> None:
    """A CA of the registry's own, and its serving certificate for `address`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = _ca(now)  # fresh per start, like the control plane's; trusted only where trust_from puts it
    key, cert = issue_leaf(now, ca_key, ca_cert, common_name="towline-test-registry", server_ips=(address,))
    write_key_pair(directory / "registry.crt", directory / "registry.key", key, cert)
    (directory / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))


def _htpasswd_line(helper: Path, username: str, password: str) -> str:
    result = subprocess.run([str(helper), username], input=password + "\n", capture_output=True, text=True,
                            timeout=60, check=False)
    if result.returncode != 0 or not result.stdout.startswith(f"{username}:$2"):
        raise RegistryUnavailable(f"the htpasswd helper failed: {result.stderr.strip()}")
    return result.stdout
