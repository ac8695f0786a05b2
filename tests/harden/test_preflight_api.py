"""Public API of gpufield.harden.preflight: ``__all__`` lists exactly the public names, each documented;
every check in the table satisfies the PreflightCheck protocol with a unique dotted name."""

from __future__ import annotations

import importlib

import pytest

from gpufield.harden.preflight import CHECKS
from gpufield.harden.protocols import PreflightCheck


@pytest.mark.parametrize("name", ["gpufield.harden.preflight"])
def test_all_matches_public_names(name):
    mod = importlib.import_module(name)
    declared = set(mod.__all__)
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, type(importlib))
              and n != "annotations"}
    assert declared == public
    for n in declared - {"CHECKS", "SCHEMA"}:
        assert getattr(mod, n).__doc__, n


def test_checks_follow_the_protocol():
    names = [c.name for c in CHECKS]
    assert len(set(names)) == len(names) == 15
    for c in CHECKS:
        assert isinstance(c, PreflightCheck) and "." in c.name and c.description and type(c).run.__doc__
