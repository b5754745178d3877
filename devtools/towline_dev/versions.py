"""The one place the local control plane's component versions are pinned.

Everything that builds, finds or checks the Kubernetes binaries reads these
constants; change a version here and nowhere else.
"""

from __future__ import annotations

from towline_dev.debversions import DebianPin

KUBERNETES_VERSION = "v1.35.4"
"""k8s.io/kubernetes release: kube-apiserver, kube-controller-manager, kubectl."""

ETCD_VERSION = "v3.6.5"
"""go.etcd.io/etcd/server/v3: the etcd that Kubernetes 1.35 is released with."""

HELM_VERSION = "v3.20.2"
"""helm.sh/helm/v3: the release built against client-go 0.35."""

COREDNS_VERSION = "v1.14.7"
"""github.com/coredns/coredns: the local node's cluster DNS, run as a pod."""

KUBE_ROUTER_VERSION = "v2.1.0"
"""github.com/cloudnativelabs/kube-router/v2: only its NetworkPolicy controller runs."""

LOCAL_PATH_PROVISIONER_VERSION = "v0.0.30"
"""github.com/rancher/local-path-provisioner: the local node's default StorageClass `local-path` (what kind
and k3s ship), provisioning each PersistentVolume as a directory under the node's state directory."""

DISTRIBUTION_VERSION = "v3.1.2"
"""github.com/distribution/distribution/v3: the password-protected registry of the private-registry
install test (its `cmd/registry`; towline_dev.registry)."""

CRANE_VERSION = "v0.22.1"
"""github.com/google/go-containerregistry: `crane`, which pushes an OCI layout to that registry."""

KWOK_VERSION = "v0.7.0"
"""sigs.k8s.io/kwok: simulated nodes for the scale benchmarks and the shard tests (tests/bench/simcluster.py)."""

ARGO_WORKFLOWS_VERSION = "v4.0.5"
"""github.com/argoproj/argo-workflows/v4: the `workflow-controller` and its CRDs that the side-by-side
benchmark runs next to Towline (tests/bench/bench_argo.py; never needed by the tests)."""

KUBECONFORM_VERSION = "v0.8.0"
"""github.com/yannh/kubeconform: validates the rendered chart and the examples against JSON schemas
made from this Kubernetes release's OpenAPI and Towline's CRDs (towline_dev.kubeconform)."""

PROMETHEUS_VERSION = "v0.316.0"
"""github.com/prometheus/prometheus at Prometheus 3.16.0 (its Go module versions are v0.3XX.Y for v3.XX.Y):
`promtool check rules` and `promtool test rules` over the chart's alerts (towline_dev.promtool)."""

HYDRA_VERSION = "v2.3.0"
"""github.com/ory/hydra/v2: the OpenID Connect provider the tests sign people in with (towline_dev.idp), built
with its SQLite store (cgo) and run in memory; the test control plane's API server trusts it."""

JAEGER_VERSION = "v1.75.0"
"""github.com/jaegertracing/jaeger: the tracing tests' collector (its all-in-one command: OTLP in, the query API
out, spans kept in memory), built by towline_dev.jaeger; never part of a release."""

CLI_UTILS_VERSION = "v0.37.2"
"""sigs.k8s.io/cli-utils: its kstatus package, which Flux, kpt and Config Sync read object health with;
a small command over it (towline_dev/kstatus.go) shows what they make of a WorkflowRun (towline_dev.kstatus)."""

CLOUDEVENTS_SDK_GO_VERSION = "v2.16.2"
"""github.com/cloudevents/sdk-go/v2: the CloudEvents SDK for Go that the interop tests send and receive with
(towline_dev/cesdk: its go.mod and go.sum pin the same version; towline_dev.cloudevents_go builds it)."""

KNATIVE_EVENTING_VERSION = "v0.47.0"
"""knative.dev/eventing at Knative Eventing 1.20 (its Go module versions are v0.X.Y for 1.(X-27).Y): its
`heartbeats` sample, the Knative sender of the CloudEvents interop tests (towline_dev.cloudevents_go)."""

# Debian packages. Debian's archives keep only the newest build of a package: a security or
# stable update replaces the build a pin names, and the day it lands the pinned version is no
# longer offered. So each pin says what else it accepts (towline_dev.debversions): the same
# upstream version at a later Debian revision (what a security update of a stable release
# ships), or for a browser any newer version. `make test` checks that the mirror still offers
# something every pin accepts (`python -m towline_dev.debpackages --check`), and the install
# says which version it took when the pinned one is gone.

DEBIAN_PACKAGES = {
    "containerd": DebianPin("1.6.20~ds1-1+deb12u3"),
    "runc": DebianPin("1.1.5+ds1-1+deb12u1"),
    "containernetworking-plugins": DebianPin("1.1.1+ds1-3+b5"),
    "iptables": DebianPin("1.8.9-2"),
    "ipset": DebianPin("7.17-1"),
    "conntrack": DebianPin("1:1.4.7-1+b2"),
    "busybox-static": DebianPin("1:1.35.0-4+deb12u1+b1"),
}
"""Debian 12 packages the local node runs (CRI runtime, CNI plugins, netfilter tools) and
the static busybox its test images are made from; installed through `towline_dev.debpackages`.
The node's behaviour is the upstream version's, so a later Debian revision of it is taken."""

WALKTHROUGH_PACKAGES = {"skopeo": DebianPin("1.9.3+ds1-1+b10")}
"""Debian 12 packages the README walkthrough test types commands of besides kubectl and helm: skopeo,
which copies a release's image archives into a registry as the README's install does."""

BROWSER_TEST_PACKAGES = {
    "chromium": DebianPin("156.0.8078.129-1~deb12u1", accepts="newer"),
    "chromium-driver": DebianPin("156.0.8078.129-1~deb12u1", accepts="newer"),
}
"""Debian 12 packages the web view's browser tests drive (headless, through selenium): Chromium and
its WebDriver. Debian ships Chromium through bookworm-security, a new major version every few weeks
with the old build gone, so any version at least this one is taken (the driver comes from the same
source package, so apt installs the two at one version)."""

POSTGRESQL_PACKAGES = {"postgresql-15": DebianPin("15.20-0+deb12u1", accepts="newer")}
"""The PostgreSQL server the archive's tests run against (towline_dev.postgres). Its security updates
are new upstream minor releases (15.18 -> 15.20), so any newer 15.x is taken: the package name holds
the major version the schema is tested on."""

# Container images (towline_dev.images). The base image's packages come from the
# suite as the mirror offers them on the day of the build (its digest records what
# went in); the tools that build it are pinned like the rest.

IMAGE_DEBIAN_SUITE = "bookworm"
"""The suite the local base image is built from (Debian 12 ships Python 3.11)."""

IMAGE_BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libstdc++6")
"""What the base adds to Debian's essential set: the interpreter, venv, CA certificates, and the C++ runtime
google-re2's manylinux wheel links against (the operator matches step types' schema patterns with RE2)."""

IMAGE_TOOL_PACKAGES = {
    "buildah": DebianPin("1.28.2+ds1-3+deb12u1+b3"),
    "mmdebstrap": DebianPin("1.3.5-7"),
}
"""Debian packages that build the images without a daemon."""

IMAGE_TEST_PACKAGES = {name: DEBIAN_PACKAGES[name] for name in ("runc", "containerd")}
"""Debian packages the image tests run containers and import archives with."""

IMAGE_BUILD_TOOLS = {"setuptools": "80.9.0", "wheel": "0.45.1"}
"""The wheel build's own tools, pinned in images/constraints.txt with everything else."""

ALL_DEBIAN_PINS = {
    "the local node": DEBIAN_PACKAGES,
    "the README walkthrough test": WALKTHROUGH_PACKAGES,
    "the web view's browser tests": BROWSER_TEST_PACKAGES,
    "the archive's PostgreSQL tests": POSTGRESQL_PACKAGES,
    "building the container images": IMAGE_TOOL_PACKAGES,
}
"""Every group of Debian pins, by what needs it: what `python -m towline_dev.debpackages --check` checks."""
