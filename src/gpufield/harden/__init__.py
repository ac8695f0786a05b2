"""gpufield.harden (see README)."""

__all__: list[str] = []
