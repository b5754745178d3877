"""TOWLINE_UI_URL (the chart's ui.url): the origin approval notifications link to, or a clear refusal."""

from __future__ import annotations

import pytest

from towline.runtime.config import OperatorConfig, web_view_url


def test_an_origin_is_taken_without_its_trailing_slash() -> None:
    assert web_view_url({"TOWLINE_UI_URL": "https://towline.example.com/"}) == "https://towline.example.com"
    environment = {"TOWLINE_UI_URL": "https://towline.example.com", "TOWLINE_REQUIRE_ISOLATION": "false"}
    assert OperatorConfig.from_environment(environment).web_view_url == "https://towline.example.com"


def test_empty_or_unset_means_no_links() -> None:
    assert web_view_url({}) is None and web_view_url({"TOWLINE_UI_URL": " "}) is None


@pytest.mark.parametrize("value", ["towline.example.com", "https://towline.example.com/ui", "ftp://x",
                                   "https://towline.example.com?x=1"])
def test_anything_but_an_origin_is_refused_naming_the_chart_value(value: str) -> None:
    with pytest.raises(ValueError, match=r"set ui\.url"):
        web_view_url({"TOWLINE_UI_URL": value})
