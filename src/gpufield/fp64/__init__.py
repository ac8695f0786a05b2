"""gpufield.fp64 (see README)."""

__all__: list[str] = []
