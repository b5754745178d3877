"""Find a decorated step function from `<module>:<attribute>`, as the manifest tool and `python -m towline_step` do."""

from __future__ import annotations

import importlib
from typing import Any

from towline_step.definition import Step


def load_step(target: str) -> Step[Any, Any]:
    """Import the module and return the attribute, which must be a function decorated with @step."""
    module_name, separator, attribute = target.partition(":")
    if not separator or not module_name or not attribute:
        raise ValueError(f"name the step as <module>:<attribute>, e.g. greeter:greet, not {target!r}")
    value: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    if not isinstance(value, Step):
        raise TypeError(f"{target} is a {type(value).__name__}, not a function decorated with @step")
    return value
