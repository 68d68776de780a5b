"""Replacing a function of MXNet's by a wrapper that receives the original."""

import functools
import inspect
from typing import Any, Callable


def patch(owner: Any, name: str, replacement: Callable) -> None:
    """owner.name = replacement(original, ...); a function, so it binds as a method too.
    Idempotent: an attribute already replaced is left as it is."""
    original = getattr(owner, name)
    if hasattr(original, "_mxkv_original"):
        return

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return replacement(original, *args, **kwargs)

    wrapper._mxkv_original = original  # type: ignore[attr-defined]  # marks a patched one
    setattr(owner, name, wrapper)


def bind_call(function: Callable, *args, **kwargs) -> inspect.BoundArguments:
    """The arguments of a call by name, defaults filled in: change `.arguments`, then call
    function(*bound.args, **bound.kwargs)."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound
