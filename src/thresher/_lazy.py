"""Lazy package attributes (PEP 562): a package names what it exports without importing it, so a
light entry point (`thresher --help`) does not pay for numpy and onnxruntime it never uses."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """(__getattr__, __dir__) for `package`: exports[name] is "module" (its attribute `name`) or
    "module:dotted.attribute", imported on first access."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, path = exports[name].partition(":")
        value = importlib.import_module(module)
        for part in (path or name).split("."):
            value = getattr(value, part)
        namespace[name] = value  # later accesses skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
