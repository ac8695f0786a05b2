"""gpufield.power (see README)."""

__all__: list[str] = []
