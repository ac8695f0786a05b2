"""Each wing's ``__all__`` lists exactly its public names, and each of them exists (httpx style)."""

from __future__ import annotations

import importlib

import pytest

WINGS = ["gpufield.telemetry", "gpufield.triage", "gpufield.verify", "gpufield.power", "gpufield.fp64", "gpufield.harden"]


@pytest.mark.parametrize("name", WINGS)
def test_all_matches_public_names(name):
    mod = importlib.import_module(name)
    declared = set(getattr(mod, "__all__", ()))
    public = {
        n
        for n, v in vars(mod).items()
        if not n.startswith("_") and not isinstance(v, type(importlib))
        and n not in {"annotations"}
    }
    assert declared == public, f"{name}: __all__ - public = {declared - public}, public - __all__ = {public - declared}"
    for n in declared:
        assert getattr(mod, n).__doc__, f"{name}.{n} has no docstring"
