"""GPU telemetry given to triage with ``--telemetry FILE``: plotted in the HTML report, stored in ``samples``.

Two real formats, told apart by content:

* ``nvidia-smi --query-gpu=timestamp,index,...  --format=csv`` (with or without ``nounits``, ``-l N``
  loops: repeated header lines are skipped). The header gives each column's unit (``power.draw [W]``);
  values such as ``[N/A]`` / ``[Not Supported]`` are skipped. nvidia-smi prints local time without a
  zone (``2024/05/18 19:02:39.123``): read as UTC, like zone-less log stamps (``IngestOptions``).
* Prometheus text from dcgm-exporter (``DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-..",...} 231.5``),
  parsed by :func:`gpufield.telemetry.parse_text`; a sample without its own timestamp gets the
  file's modification time (one scrape).

Metric names carry units: ``power_w``, ``sm_clock_hz``, ``mem_clock_hz``, ``temperature_c``,
``gpu_util_fraction``, ``ecc_*`` counts, ``xid_last`` (DCGM_FI_DEV_XID_ERRORS: the last Xid seen);
other columns and metrics keep a sanitised name with the unit appended. The host is the nearest
folder of the file whose name looks like a host name (:func:`gpufield.triage.analyze.folder_host`
rules, e.g. ``job/node-b/smi.csv``), else the dcgm-exporter ``Hostname`` label, else none.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from gpufield.errors import InputError

__all__ = ["Sample", "read_telemetry"]

_SMI_FIELDS = {"power.draw": "power_w", "power.draw.instant": "power_w", "power.draw.average": "power_avg_w",
               "clocks.sm": "sm_clock_hz", "clocks.current.sm": "sm_clock_hz", "clocks.mem": "mem_clock_hz",
               "clocks.current.memory": "mem_clock_hz", "clocks.gr": "graphics_clock_hz",
               "clocks.current.graphics": "graphics_clock_hz", "temperature.gpu": "temperature_c",
               "utilization.gpu": "gpu_util_fraction", "utilization.memory": "mem_util_fraction",
               "ecc.errors.corrected.volatile.total": "ecc_sbe_volatile",
               "ecc.errors.uncorrected.volatile.total": "ecc_dbe_volatile",
               "ecc.errors.corrected.aggregate.total": "ecc_sbe_aggregate",
               "ecc.errors.uncorrected.aggregate.total": "ecc_dbe_aggregate"}
_UNIT_SCALE = {"W": ("_w", 1.0), "MHz": ("_hz", 1e6), "%": ("_fraction", 0.01), "MiB": ("_bytes", float(1 << 20)),
               "C": ("_c", 1.0)}
_DCGM = {"DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0), "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_hz", 1e6),
         "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_hz", 1e6), "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
         "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_fraction", 0.01), "DCGM_FI_DEV_XID_ERRORS": ("xid_last", 1.0),
         "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_volatile", 1.0),
         "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", 1.0),
         "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_sbe_aggregate", 1.0),
         "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_dbe_aggregate", 1.0)}
_HEAD = re.compile(r"^\s*([\w.]+)\s*(?:\[([^\]]+)\])?\s*$")


@dataclass(frozen=True, slots=True)
class Sample:
    """One telemetry value.

    Attributes:
        ts_ns: ns since the epoch (UTC). metric: name with unit suffix. value: SI value.
        host, gpu_index, gpu_uuid, pci_bdf: where it was measured, where known.
        file, line: where it was read (1-based line).
    """

    ts_ns: int
    metric: str
    value: float
    host: str | None
    gpu_index: int | None
    gpu_uuid: str | None
    pci_bdf: str | None
    file: str
    line: int


def _host_of(path: str) -> str | None:
    from gpufield.triage.analyze import folder_host

    parent = os.path.dirname(os.path.abspath(path))
    return folder_host(path, [os.path.dirname(parent)]) if parent else None


def _smi_time(text: str, path: str, line: int) -> int:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return int(datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC).timestamp() * 1e9)
        except ValueError:
            continue
    raise InputError(f"timestamp {text.strip()!r}: expected nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm", path=path, line=line)


def _read_smi_csv(text: str, path: str) -> list[Sample]:
    from gpufield.telemetry import normalize_bdf

    host = _host_of(path)
    out: list[Sample] = []
    cols: list[tuple[str, str | None]] | None = None
    for n, row in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), start=1):
        if not row or not "".join(row).strip():
            continue
        if row[0].strip() == "timestamp":  # a header (repeated by some -l loops)
            cols = []
            for cell in row:
                m = _HEAD.match(cell)
                if not m:
                    raise InputError(f"column {cell!r}: expected an nvidia-smi field name like 'power.draw [W]'",
                                     path=path, line=n)
                cols.append((m.group(1), m.group(2)))
            continue
        if cols is None:
            raise InputError("expected a header line starting with 'timestamp' (nvidia-smi --query-gpu=timestamp,... "
                             "--format=csv)", path=path, line=n)
        if len(row) != len(cols):
            raise InputError(f"expected {len(cols)} fields as in the header, got {len(row)}", path=path, line=n)
        cells = {name: v.strip() for (name, _u), v in zip(cols, row, strict=True)}
        ts = _smi_time(cells["timestamp"], path, n)
        idx = cells.get("index")
        bdf = cells.get("pci.bus_id")
        where = dict(gpu_index=int(idx) if idx and idx.isdigit() else None, gpu_uuid=cells.get("uuid") or None,
                     pci_bdf=normalize_bdf(bdf) if bdf else None)
        for (name, unit), raw in zip(cols, row, strict=True):
            if name in ("timestamp", "index", "pci.bus_id", "uuid", "name", "serial", "driver_version"):
                continue
            tok = raw.strip().split(" ")[0]
            try:
                val = float(tok)
            except ValueError:  # [N/A], [Not Supported], text fields
                continue
            if name in _SMI_FIELDS:  # nvidia-smi reports these in MHz, %, W, C (with or without nounits)
                metric = _SMI_FIELDS[name]
                scale = 1e6 if metric.endswith("_hz") else 0.01 if metric.endswith("_fraction") else 1.0
            else:
                suffix, scale = _UNIT_SCALE.get(unit or "", ("", 1.0))
                metric = re.sub(r"\W+", "_", name) + suffix
            out.append(Sample(ts_ns=ts, metric=metric, value=val * scale, host=host, file=path, line=n, **where))
    return out


def _read_prom(text: str, path: str) -> list[Sample]:
    from gpufield.telemetry import normalize_bdf, parse_text

    host = _host_of(path)
    mtime_ns = int(os.path.getmtime(path) * 1e9)
    out: list[Sample] = []
    for fam in parse_text(text, path=path).values():
        for s in fam.samples:
            if not math.isfinite(s.value):
                continue
            metric, scale = _DCGM.get(s.name, (re.sub(r"\W+", "_", s.name).lower(), 1.0))
            lab = s.labels
            gpu = lab.get("gpu")
            bdf = lab.get("pci_bus_id")
            out.append(Sample(ts_ns=s.timestamp_ms * 1_000_000 if s.timestamp_ms is not None else mtime_ns,
                              metric=metric, value=s.value * scale, host=host or lab.get("Hostname") or lab.get("hostname"),
                              gpu_index=int(gpu) if gpu and gpu.isdigit() else None, gpu_uuid=lab.get("UUID"),
                              pci_bdf=normalize_bdf(bdf) if bdf else None, file=path, line=s.line))
    return out


def read_telemetry(path: str | os.PathLike[str]) -> list[Sample]:
    """Read one telemetry file (format detected from its first non-blank line).

    Returns:
        Its samples in file order.

    Raises:
        InputError: missing file, invalid UTF-8, or a line that fits neither format (file:line named).
    """
    from gpufield._files import read_text

    p = os.fspath(path)
    text = read_text(p, what="nvidia-smi --query-gpu CSV or Prometheus text", gz=p.endswith(".gz"))
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("timestamp"):
        return _read_smi_csv(text, p)
    if first.lstrip().startswith("#") or re.match(r"^\s*[A-Za-z_:][\w:]*(\{|\s)", first):
        return _read_prom(text, p)
    raise InputError("not telemetry: expected nvidia-smi --query-gpu=timestamp,... --format=csv output or "
                     "Prometheus / dcgm-exporter text", path=p, line=1)
