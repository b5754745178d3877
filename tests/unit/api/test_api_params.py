"""A param's declared type: one check for a run's values (engine) and a workflow's defaults (validation)."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from towline.api.workflow import Param, ParamType, fits_param_type
from towline.engine import resolve_params
from towline.validation.triggers import param_type_problem

VALUES: list[tuple[Any, ParamType]] = [
    ("x", "string"), (3, "integer"), (2.5, "number"), (True, "boolean"),
    ({"a": 1}, "object"), ([1], "array"),
]


@pytest.mark.parametrize("kind", get_args(ParamType))
@pytest.mark.parametrize(("value", "own_kind"), VALUES)
def test_a_value_fits_its_own_types_only(value: Any, own_kind: ParamType, kind: ParamType) -> None:
    fits = kind == own_kind or (own_kind == "integer" and kind == "number")
    assert fits_param_type(value, kind) is fits


@pytest.mark.parametrize("kind", ["integer", "number"])
def test_true_is_never_a_number_for_a_run_or_a_default(kind: ParamType) -> None:
    param = Param(name="limit", type=kind)
    _, errors = resolve_params([param], {"limit": True})
    assert errors == [f"spec.params limit: expected {kind}, got bool True"]
    assert param_type_problem(param, True) == f"is a boolean, but the param is declared type: {kind}"
