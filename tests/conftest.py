"""Shared fixtures: the read-only project data at ``../shared`` (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

try:  # the fixed CI profile: every hypothesis test draws the same examples on every clone and run
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    _hyp_settings.load_profile("ci")
except ImportError:  # hypothesis is a test dependency; tests that need it import it themselves
    pass


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """Path of ``../shared``; skips the test with a reason where it is not present (a user's clone)."""
    if not (SHARED / "data").is_dir():
        pytest.skip(f"shared data not found at {SHARED} (only CI and developer machines have it)")
    return SHARED


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords or "multigpu" in item.keywords:
            item.add_marker(skip)
