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
    imported = (layout.SANDBOX_IMAGE, layout.COREDNS_IMAGE, TOWLINE_IMAGE, RUNNER_IMAGE, STEP_TYPE_IMAGE_PREFIX)
    assert all(image.startswith("localhost/") for image in imported), imported
