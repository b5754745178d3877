"""The Go interop programs build from what the repository pins: the SDK version of versions.py is the one the
command's go.mod requires and its go.sum checks (a build with -mod=readonly takes nothing else)."""

from __future__ import annotations

from towline_dev.cloudevents_go import CESDK_SOURCE, SDK_MODULE, pinned_sdk_version
from towline_dev.versions import CLOUDEVENTS_SDK_GO_VERSION


def test_the_commands_go_mod_requires_the_sdk_version_versions_py_pins() -> None:
    assert pinned_sdk_version((CESDK_SOURCE / "go.mod").read_text()) == CLOUDEVENTS_SDK_GO_VERSION


def test_the_commands_go_sum_holds_the_pinned_sdks_hash() -> None:
    assert f"{SDK_MODULE} {CLOUDEVENTS_SDK_GO_VERSION} h1:" in (CESDK_SOURCE / "go.sum").read_text()


def test_a_go_mod_without_the_sdk_pins_nothing() -> None:
    assert pinned_sdk_version("module x\n\ngo 1.25.0\n\nrequire github.com/cloudevents/sdk-go/v3 v3.0.0\n") is None
    assert pinned_sdk_version("require (\n\tgithub.com/cloudevents/sdk-go/v2 v2.1.0 // indirect\n)\n") == "v2.1.0"
