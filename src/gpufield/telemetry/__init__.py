"""gpufield.telemetry (see README)."""

__all__: list[str] = []
