"""Exception hierarchy of gpufield.

Every error gpufield raises on purpose derives from :class:`GpufieldError`::

    GpufieldError
    ├── InputError (ValueError)          bad user input: file, line and what was expected
    │   ├── LogFormatError               triage: a log file could not be read at all
    │   ├── ModelFormatError             verify: ONNX model unsupported / inconsistent
    │   ├── SpecFormatError              verify: VNN-LIB syntax or semantics
    │   └── ProfileMismatchError         power: a saved profile does not fit this setup
    ├── DependencyError (ImportError)    an optional extra is missing; names the pip command
    ├── TelemetryError                   NVML / Prometheus / store failures
    │   ├── NvmlUnavailableError         no driver, no GPU, or NVML library missing
    │   └── NvmlTimeoutError             an NVML call did not return within its deadline
    ├── ActuationError                   power: a write was refused or did not read back
    └── NumericsError                    fp64: a precondition of the emulation is violated

The CLI maps these to exit codes in one place (``gpufield.cli``).
"""

from __future__ import annotations


class GpufieldError(Exception):
    """Root of all gpufield errors."""


class InputError(GpufieldError, ValueError):
    """User input is malformed.

    Args:
        message: what is wrong and what was expected.
        path: the file the input came from, if any.
        line: 1-based line number, if known.
        column: 1-based column, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.message = message
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
                if column is not None:
                    where += f":{column}"
            where += ": "
        super().__init__(where + message)


class LogFormatError(InputError):
    """Triage: nothing could be read from the given log input."""


class ModelFormatError(InputError):
    """Verify: the ONNX model is unsupported or inconsistent."""


class SpecFormatError(InputError):
    """Verify: the VNN-LIB property is malformed."""


class ProfileMismatchError(InputError):
    """Power: a saved profile is stale or does not match the current setup."""


class DependencyError(GpufieldError, ImportError):
    """An optional dependency is missing; the message names the pip command that installs it."""


class TelemetryError(GpufieldError):
    """Telemetry could not be read."""


class NvmlUnavailableError(TelemetryError):
    """NVML is not usable here: no driver, no GPU, or the library is missing."""


class NvmlTimeoutError(TelemetryError):
    """An NVML call did not return within its deadline (a wedged driver); names the call and the limit.

    Attributes:
        call: the NVML function that was in flight, e.g. ``"nvmlDeviceGetRemappedRows"``.
        timeout_s: the deadline it missed, in seconds.
    """

    def __init__(self, call: str, timeout_s: float, *, earlier: bool = False) -> None:
        self.call = call
        self.timeout_s = timeout_s
        tail = " (NVML is treated as wedged from then on)" if earlier else ""
        super().__init__(f"NVML call {call} did not return within {timeout_s:g} s{tail}")


class ActuationError(GpufieldError):
    """Power: a device write was refused, clamped unexpectedly, or did not read back."""


class NumericsError(GpufieldError):
    """FP64 emulation: a precondition of exactness (e.g. CRT uniqueness) would be violated."""


def require(module: str, extra: str):
    """Import an optional dependency or raise :class:`DependencyError` naming the extra.

    Args:
        module: importable module name, e.g. ``"torch"``.
        extra: the gpufield extra that provides it, e.g. ``"verify"``.

    Returns:
        The imported module.

    Raises:
        DependencyError: the module is not installed.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise DependencyError(
            f"{module} is required for this feature: pip install 'gpufield[{extra}]'"
        ) from e
