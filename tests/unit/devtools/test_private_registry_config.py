"""The private registry's pure parts: what the registry, the node's containerd and a pull secret are told."""

from __future__ import annotations

import base64
import json
import tomllib
from pathlib import Path

from towline_dev import registry
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE
from towline_dev.node import layout
from towline_dev.release import STEP_TYPE_IMAGE_PREFIX


def test_registry_requires_htpasswd_auth_and_serves_tls_from_its_state_directory(tmp_path: Path) -> None:
    config = registry.registry_config(address="198.51.100.250", port=5443, state_dir=tmp_path,
                                     http_secret="fixed")
    assert config["auth"] == {"htpasswd": {"realm": "towline-test-registry", "path": str(tmp_path / "htpasswd")}}
    http = config["http"]
    assert isinstance(http, dict)
    assert http["addr"] == "198.51.100.250:5443"
    assert http["tls"] == {"certificate": str(tmp_path / "registry.crt"), "key": str(tmp_path / "registry.key")}


def test_node_containerd_reads_registry_hosts_from_its_state_directory(tmp_path: Path) -> None:
    paths = layout.NodePaths(tmp_path)
    config = tomllib.loads(layout.containerd_config(paths))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"] == {"config_path": str(paths.registry_hosts_dir)}
    assert paths.registry_hosts_dir.is_relative_to(tmp_path)


def test_containerd_reaches_the_registry_over_https_trusting_its_ca_with_no_credentials(tmp_path: Path) -> None:
    hosts = tomllib.loads(registry.containerd_hosts_toml("198.51.100.250:5443", tmp_path / "ca.crt"))
    assert hosts == {"server": "https://198.51.100.250:5443", "capabilities": ["pull", "resolve"],
                     "ca": str(tmp_path / "ca.crt")}


def test_pull_secret_holds_a_docker_config_for_the_registry_host() -> None:
    config = registry.docker_config("198.51.100.250:5443", "puller", "s3cret")
    secret = registry.pull_secret("regcred", "team", config)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    data = secret["data"]
    assert isinstance(data, dict)
    decoded = json.loads(base64.b64decode(data[".dockerconfigjson"]))
    entry = decoded["auths"]["198.51.100.250:5443"]
    assert base64.b64decode(entry["auth"]).decode() == "puller:s3cret"
    assert (entry["username"], entry["password"]) == ("puller", "s3cret")


def test_kubelet_verifies_pull_credentials_for_every_image_but_the_nodes_own_imported_ones(tmp_path: Path) -> None:
    config = layout.kubelet_config(layout.NodePaths(tmp_path), ca_file=tmp_path / "ca.crt", healthz_port=1)
    assert config["imagePullCredentialsVerificationPolicy"] == "NeverVerifyAllowlistedImages"
    assert config["preloadedImagesVerificationAllowlist"] == ["localhost/*"]
    imported = (layout.SANDBOX_IMAGE, layout.COREDNS_IMAGE, layout.LOCAL_PATH_IMAGE, TOWLINE_IMAGE, RUNNER_IMAGE,
                STEP_TYPE_IMAGE_PREFIX)
    assert all(image.startswith("localhost/") for image in imported), imported


_LINE = ('time="2026-12-02T10:45:49.466840201Z" level=info msg="response completed" auth.user.name={user} '
         'go.version=go1.26.8 http.request.host="198.51.100.250:48019" http.request.method={method} '
         'http.request.uri={uri} http.request.useragent="{agent}" http.response.status={status} version=v3.1.2')
_BLOB = '"/v2/towline-private/towline/blobs/sha256:8e29"'


def test_only_the_nodes_authenticated_fetches_count_from_the_access_log() -> None:
    def line(user: str = "puller", method: str = "GET", uri: str = _BLOB, agent: str = "containerd/1.6.20~ds1",
             status: int = 200) -> str:
        return _LINE.format(user=user, method=method, uri=uri, agent=agent, status=status)

    log = "\n".join([
        line(),
        line(method="HEAD", uri="/v2/towline-private/towline/manifests/0.1.0"),
        line(user="someone-else", uri='"/v2/x/blobs/sha256:1"'),
        line(agent="crane/v0.22.1 go-containerregistry/v0.22.1", uri='"/v2/x/blobs/sha256:2"'),
        line(status=401, uri='"/v2/x/blobs/sha256:3"'),
        line().replace('msg="response completed"', 'msg="response completed with error"')
              .replace("sha256:8e29", "sha256:4"),
    ])
    assert registry.fetched_by_containerd(log, "puller") == {"/v2/towline-private/towline/blobs/sha256:8e29"}
    assert registry.fetched_by_containerd(log, "puller", ("GET", "HEAD")) == {
        "/v2/towline-private/towline/blobs/sha256:8e29", "/v2/towline-private/towline/manifests/0.1.0"}
