"""Which of Argo's settings `make bench-argo` runs (BENCH_ARGO_CONFIGS)."""

from __future__ import annotations

import pytest
from tests.bench.bench_argo import chosen_configs


def test_the_configs_are_taken_in_order_and_spaces_are_ignored() -> None:
    assert chosen_configs("default,tuned") == ["default", "tuned"]
    assert chosen_configs(" tuned ") == ["tuned"]


@pytest.mark.parametrize("value", ["", "tunde", "tuned,fast", " , "])
def test_an_unknown_or_empty_choice_names_the_variable_and_the_choices(value: str) -> None:
    with pytest.raises(SystemExit, match=r"BENCH_ARGO_CONFIGS: .* is not one of default, tuned"):
        chosen_configs(value)
