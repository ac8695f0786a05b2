"""Catalogues of codes the triage wing looks up: Xid, InfiniBand completion status, NCCL results.

All tables are data files under ``gpufield/triage/data/`` (loaded with ``importlib.resources``),
each naming its source in a ``#`` header; ``data/SOURCES.json`` records URL, commit, retrieval date
and sha256 of files embedded unmodified (tests recompute the hash):

* ``xiderrorsmapping.csv``: NVIDIA NVSentinel's Xid -> mnemonic, immediate resolution bucket,
  FATAL/NONFATAL (derived by NVIDIA from the official Xid catalogue xlsx), embedded unmodified.
* ``xid_text.csv``: short description per Xid from dcgm-exporter ``xid_errors.go``.
* ``xid_triage.csv``: what the Xid means for a training job (gpufield notes, triage.md §2.1).
* ``ib_wc_status.csv``: ``enum ibv_wc_status`` (rdma-core ``verbs.h`` / ``ibv_wc_status_str``).
* ``nccl_result.csv``: ``ncclResult_t`` and ``ncclGetErrorString`` (NVIDIA/nccl).
* ``nccl_error_string.csv``: every ``ncclGetErrorString`` text of the NCCL 2 releases (older texts
  lack the ``(run with NCCL_DEBUG=...)`` hints) with its ``ncclResult_t``.

Clock-event reason bits are not duplicated here: see
:func:`gpufield.telemetry.decode_clock_event_reasons`.

Unknown codes never raise: they return an entry with ``known=False`` and a text saying so
(NVSentinel's rule: an unknown Xid maps to CONTACT_SUPPORT).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["XidInfo", "CodeInfo", "xid_info", "xid_catalog", "ib_status", "nccl_result",
           "nccl_result_of_error_string"]

#: bucket used for Xids the catalogue does not know (NVSentinel: unknown -> CONTACT_SUPPORT)
UNKNOWN_BUCKET = "CONTACT_SUPPORT"


@dataclass(frozen=True, slots=True)
class XidInfo:
    """What NVIDIA's catalogue says about one Xid.

    Attributes:
        code: the Xid number.
        mnemonic: catalogue mnemonic (``ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS``), "" if none.
        description: short text (dcgm-exporter), "" if none.
        bucket: immediate resolution bucket (``RESTART_APP``, ``RESET_GPU``, ``RESTART_BM``,
            ``WORKFLOW_XID_48``, ``IGNORE``, ...; ``CONTACT_SUPPORT`` when unknown).
        fatal: True/False from the NVSentinel FATAL column, None when the catalogue is silent.
        triage_meaning: what it means for a training job ("" when we have no note).
        known: False for a code no table lists.
    """

    code: int
    mnemonic: str
    description: str
    bucket: str
    fatal: bool | None
    triage_meaning: str
    known: bool = True


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """One entry of a small enum catalogue (IB status, NCCL result).

    Attributes:
        code: numeric value.
        name: enum name (``IBV_WC_RETRY_EXC_ERR``, ``ncclRemoteError``), or ``"unknown"``.
        text: the library's own error string.
        triage_meaning: what it usually means in a failed training job ("" if no note).
        known: False when the code is not in the table.
    """

    code: int
    name: str
    text: str
    triage_meaning: str
    known: bool = True


def _rows(name: str) -> list[list[str]]:
    text = resources.files("gpufield.triage").joinpath("data", name).read_text("utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.reader(io.StringIO("\n".join(lines))))


@cache
def xid_catalog() -> dict[int, XidInfo]:
    """All known Xids, merged from the three Xid data files.

    Returns:
        ``{code: XidInfo}`` for every code in any of the files (0..172 at this writing).
    """
    mapping = {int(r[0]): r for r in _rows("xiderrorsmapping.csv")}
    texts = {int(r[0]): r[1] for r in _rows("xid_text.csv")[1:]}
    notes = {int(r[0]): r for r in _rows("xid_triage.csv")[1:]}
    out: dict[int, XidInfo] = {}
    for code in sorted(set(mapping) | set(texts) | set(notes)):
        m = mapping.get(code)
        n = notes.get(code)
        bucket = (m[2].strip() if m else "") or (n[1].strip() if n else "")
        if bucket.startswith("Follow guidance"):
            bucket = "FOLLOW_LINKED_XID"
        fatal = None if not m else {"FATAL": True, "NONFATAL": False}.get(m[3].strip())
        out[code] = XidInfo(code=code, mnemonic=m[1].strip() if m else "",
                            description=texts.get(code, ""), bucket=bucket or UNKNOWN_BUCKET,
                            fatal=fatal, triage_meaning=n[2].strip() if n else "")
    return out


def xid_info(code: int | str) -> XidInfo:
    """Look up one Xid.

    Args:
        code: Xid number (int or decimal text, e.g. an :class:`~gpufield.triage.events.Event`
            ``code``).

    Returns:
        The catalogue entry; for a code no table lists, ``XidInfo(known=False,
        bucket="CONTACT_SUPPORT", description="unknown Xid N ...")``. Never raises.
    """
    try:
        n = int(str(code).strip())
    except ValueError:
        n = -1
    info = xid_catalog().get(n)
    if info is not None:
        return info
    return XidInfo(code=n, mnemonic="", bucket=UNKNOWN_BUCKET, fatal=None, known=False,
                   description=f"unknown Xid {code!s}: not in NVSentinel xiderrorsmapping.csv or "
                               "dcgm-exporter xid_errors.go; check the current NVIDIA Xid catalogue",
                   triage_meaning="")


@cache
def _enum_table(name: str) -> dict[int, CodeInfo]:
    rows = _rows(name)[1:]
    return {int(r[0]): CodeInfo(code=int(r[0]), name=r[1], text=r[2], triage_meaning=r[3]) for r in rows}


def _lookup(name: str, code: int | str, what: str) -> CodeInfo:
    try:
        n = int(str(code).strip())
    except ValueError:
        n = -1
    info = _enum_table(name).get(n)
    if info is not None:
        return info
    return CodeInfo(code=n, name="unknown", text=f"unknown {what} {code!s}", triage_meaning="", known=False)


def ib_status(code: int | str) -> CodeInfo:
    """``enum ibv_wc_status`` entry, e.g. ``ib_status(12).name == "IBV_WC_RETRY_EXC_ERR"``.

    Source: rdma-core ``libibverbs/verbs.h`` and ``ibv_wc_status_str``. Unknown -> ``known=False``.
    """
    return _lookup("ib_wc_status.csv", code, "ibv_wc_status")


def nccl_result(code: int | str) -> CodeInfo:
    """``ncclResult_t`` entry, e.g. ``nccl_result(6).name == "ncclRemoteError"``.

    Source: NVIDIA/nccl ``nccl.h`` and ``ncclGetErrorString``. Unknown -> ``known=False``.
    """
    return _lookup("nccl_result.csv", code, "ncclResult_t")


@cache
def _nccl_error_strings() -> tuple[tuple[str, int], ...]:
    """``(text, ncclResult_t value)`` of every release's ``ncclGetErrorString``, longest text first."""
    rows = [(r[0], int(r[1])) for r in _rows("nccl_error_string.csv")[1:]]
    return tuple(sorted(rows, key=lambda r: -len(r[0])))


def nccl_result_of_error_string(message: str) -> CodeInfo | None:
    """The ``ncclResult_t`` whose ``ncclGetErrorString`` text (of any NCCL 2 release) begins ``message``.

    Programs print that text for a failed NCCL call, sometimes followed by more (nccl-tests adds
    ``" / " + ncclGetLastError()``). The longest matching text wins, so ``"internal error - please
    report ..."`` (NCCL >= 2.18) and ``"internal error"`` (before) both give ``ncclInternalError``.

    Args:
        message: the printed text, e.g. ``"unhandled system error"``; leading blanks are ignored,
            case is not.

    Returns:
        The :func:`nccl_result` entry (``code``, ``name``, current ``text``, ``triage_meaning``), or
        None when no release's text begins ``message``.

    Source: ``data/nccl_error_string.csv`` (NVIDIA/nccl ``src/init.cc``, tags v2.3.5-5 .. v2.30.7-1).
    """
    msg = message.lstrip()
    for text, code in _nccl_error_strings():
        if msg.startswith(text) and (len(msg) == len(text) or not msg[len(text)].isalnum()):
            return nccl_result(code)
    return None


@cache
def cuda_driver_results() -> dict[str, CodeInfo]:
    """CUDA driver API ``CUresult`` names -> entry (``triage_meaning`` holds the runtime ``cudaError_t`` name).

    Source: ``cuda.h`` (enum ``cudaError_enum``) and ``cuGetErrorString`` as transcribed in
    ``data/cuda_driver_result.csv`` (CUDA Driver API reference). Example:
    ``cuda_driver_results()["CUDA_ERROR_ECC_UNCORRECTABLE"].code == 214``.
    """
    return {info.name: info for info in _enum_table("cuda_driver_result.csv").values()}
