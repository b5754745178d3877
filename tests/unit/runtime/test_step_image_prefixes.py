"""stepTypes.allowedImagePrefixes as the operator reads it: a prefix ends at a `/`, written or not, as in the
chart's policies (tests/integration/test_chart.py compares them)."""

from __future__ import annotations

import pytest

from towline.runtime.config import step_image_policy

POLICY = step_image_policy({"TOWLINE_STEP_TYPE_IMAGE_PREFIXES": "registry.example.com, ghcr.io/acme/"})


def test_a_prefix_ends_at_a_slash_whether_or_not_it_is_written() -> None:
    assert POLICY.allowed_prefixes == ("registry.example.com/", "ghcr.io/acme/")


@pytest.mark.parametrize("image", ["registry.example.com/steps/deploy:1", "ghcr.io/acme/deploy@sha256:" + "a" * 64])
def test_an_image_under_a_prefix_is_allowed(image: str) -> None:
    assert POLICY.problem(image) is None


@pytest.mark.parametrize("image", ["registry.example.com.evil.net/x:1", "ghcr.io/acme-evil/steal:1",
                                   "registry.example.com:1", "ghcr.io/acme"])
def test_an_image_beside_a_prefix_is_not(image: str) -> None:
    assert "is not allowed for step types" in (POLICY.problem(image) or "")
