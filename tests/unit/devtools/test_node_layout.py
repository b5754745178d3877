"""The local node's pure parts: addresses, configuration files, OCI archives, netfilter cleanup."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from towline_dev.node import layout, probehosts
from towline_dev.node.network import strip_owned_rules
from towline_dev.node.ociarchive import ImageFile, ImageSpec, write_oci_archive

DOCUMENTATION = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]


@pytest.mark.parametrize("value", [
    layout.NODE_ADDRESS, layout.POD_CIDR, layout.POD_GATEWAY, layout.SERVICE_CIDR,
    layout.KUBERNETES_SERVICE_IP, layout.CLUSTER_DNS_IP,
])
def test_every_node_address_is_in_a_documentation_range(value: str) -> None:
    network = ipaddress.ip_network(value)
    assert any(network.subnet_of(doc) for doc in DOCUMENTATION[1:]), value


def test_service_addresses_lie_in_the_service_range_and_pods_do_not_overlap_it() -> None:
    services = ipaddress.ip_network(layout.SERVICE_CIDR)
    assert ipaddress.ip_address(layout.KUBERNETES_SERVICE_IP) in services
    assert ipaddress.ip_address(layout.CLUSTER_DNS_IP) in services
    assert not ipaddress.ip_network(layout.POD_CIDR).overlaps(services)
    assert ipaddress.ip_address(layout.NODE_ADDRESS) not in services
    assert ipaddress.ip_address(layout.NODE_ADDRESS) not in ipaddress.ip_network(layout.POD_CIDR)


def test_containerd_config_restricts_oom_score_adj_and_names_the_local_sandbox(tmp_path: Path) -> None:
    config = tomllib.loads(layout.containerd_config(layout.NodePaths(tmp_path)))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == layout.SANDBOX_IMAGE
    assert cri["cni"]["conf_dir"].startswith(str(tmp_path))
    assert config["grpc"]["address"].startswith(str(tmp_path))


def test_kubelet_refuses_anonymous_requests_and_asks_the_api_server(tmp_path: Path) -> None:
    config = layout.kubelet_config(layout.NodePaths(tmp_path), ca_file=tmp_path / "ca.crt", healthz_port=1)
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["readOnlyPort"] == 0
    assert config["clusterDNS"] == [layout.CLUSTER_DNS_IP]


def test_cni_bridge_does_not_masquerade_pod_traffic(tmp_path: Path) -> None:
    bridge = layout.cni_config(layout.NodePaths(tmp_path))["plugins"][0]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": layout.POD_CIDR, "gateway": layout.POD_GATEWAY}]]


def test_oci_archive_is_a_consistent_deterministic_layout(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF pretend")
    spec = ImageSpec("localhost/probe:dev", [ImageFile(binary, "/bin/tool")], entrypoint=["/bin/tool"])
    first = write_oci_archive(spec, tmp_path / "a.tar")
    assert write_oci_archive(spec, tmp_path / "b.tar") == first
    with tarfile.open(tmp_path / "a.tar") as archive:
        blobs = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    for name, blob in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    entry = index["manifests"][0]
    assert entry["digest"] == first
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/probe:dev"
    manifest = json.loads(blobs["blobs/sha256/" + first.split(":")[1]])
    config = json.loads(blobs["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["User"] == "65532:65532"
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]


def test_netfilter_cleanup_removes_only_the_node_chains() -> None:
    saved = "\n".join([
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD DROP [0:0]",
        ":KUBE-ROUTER-FORWARD - [0:0]",
        ":KUBE-NWPLCY-ABC - [0:0]",
        ":SOMEONE-ELSE - [0:0]",
        "-A FORWARD -m comment --comment kube-router -j KUBE-ROUTER-FORWARD",
        "-A FORWARD -j SOMEONE-ELSE",
        "-A KUBE-NWPLCY-ABC -j REJECT",
        "-A INPUT -m set --match-set KUBE-DST-XYZ dst -j ACCEPT",
        "-A SOMEONE-ELSE -s 203.0.113.9/32 -j ACCEPT",
        "COMMIT",
    ])
    kept = strip_owned_rules(saved)
    assert "KUBE-" not in kept
    assert ":SOMEONE-ELSE - [0:0]" in kept
    assert "-A FORWARD -j SOMEONE-ELSE" in kept
    assert "-A SOMEONE-ELSE -s 203.0.113.9/32 -j ACCEPT" in kept
    assert ":FORWARD DROP [0:0]" in kept


def test_test_hosts_stay_clear_of_the_node_and_of_203_0_113() -> None:
    # The package mirrors this kind of machine uses answer on an address in 203.0.113.0/24:
    # a route for test hosts there would cut every apt/pip/go download off while tests run.
    hosts = ipaddress.ip_network(f"{probehosts.GATEWAY}/27", strict=False)
    assert ipaddress.ip_address(probehosts.NAMESPACE_ADDRESS) in hosts
    assert not hosts.overlaps(ipaddress.ip_network("203.0.113.0/24"))
    for taken in (layout.POD_CIDR, layout.SERVICE_CIDR, f"{layout.NODE_ADDRESS}/32"):
        assert not hosts.overlaps(ipaddress.ip_network(taken)), taken
