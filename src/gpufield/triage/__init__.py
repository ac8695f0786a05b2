"""gpufield.triage (see README)."""

__all__: list[str] = []
