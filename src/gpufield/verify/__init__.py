"""gpufield.verify (see README)."""

__all__: list[str] = []
