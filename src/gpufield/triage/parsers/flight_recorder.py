"""Flight Recorder dumps as torch writes them: the pickle of ``_dump_fr_trace`` (what
``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` writes to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``) and its JSON
variant (``_dump_fr_trace_json``, same keys).

Format (torch 2.13 ``torch/csrc/distributed/c10d/FlightRecorder*``; checked against a real gloo dump
captured by ``benchmarks/triage_fr_capture.py``): a dict with ``version``, ``pg_config``
(``{pg_name: {"name", "desc", "ranks"}}``), ``pg_status`` (``{pg_id: {"last_enqueued_collective",
"last_started_collective", "last_completed_collective"}}``) and ``entries`` (per collective:
``collective_seq_id``, ``profiling_name`` such as ``nccl:all_reduce``, ``state``, ``input_sizes``,
``frames`` = the Python stack when it was enqueued, ``process_group`` = ``(pg_id, desc)``,
``timeout_ms``, ``retired``); NCCL dumps may add ``rank``. The rank otherwise comes from the file
name (``..._<rank>`` or ``...rank<rank>``).

Untrusted data: the pickle is read by :class:`RestrictedUnpickler`, which resolves **no** global at
all (torch writes only dicts, lists, tuples, strings, numbers, booleans and None), so a dump that
tries to call ``os.system`` or any other callable is refused with :class:`~gpufield.errors.InputError`.
Never use ``pickle.load`` on these files.

Events: one ``flight_recorder`` event per process group of a dump (fields ``dump`` True, ``pg``,
``last_enqueued``, ``last_started``, ``last_completed``, ``seq`` = last enqueued, ``entry`` = what
the last recorded collective was: op, SeqNum, state, sizes and the innermost frame of its stack).
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from gpufield.errors import InputError
from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.protocols import LineContext

MAX_DUMP_BYTES = 256 << 20  # a 2000-entry dump with frames is a few MB
_RANK_IN_NAME = rx.compile(r"(?:rank_?|_|-)(\d+)(?:\.\w+)?$")


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global: only the builtin container and scalar opcodes work."""

    def find_class(self, module: str, name: str) -> Any:
        """Refuse every global (``os.system``, ``builtins.eval``, any class)."""
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a Flight Recorder dump")


def load_restricted(data: bytes, *, path: str = "<bytes>") -> Any:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`.

    Raises:
        InputError: the data is not a pickle, or it references a global (a malicious or foreign pickle).
    """
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise InputError(f"refused: not a plain Flight Recorder pickle ({e})", path=path) from e
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError) as e:
        raise InputError(f"not a readable pickle ({type(e).__name__}: {e})", path=path) from e


def looks_like_dump(head: bytes) -> bool:
    """True when the first bytes of a file are a Flight Recorder pickle or its JSON form."""
    if head[:1] == b"\x80" and b"version" in head[:64] and (b"pg_config" in head or b"entries" in head):
        return True
    text = head[:512].lstrip()
    return text[:1] == b"{" and b'"version"' in text and (b'"pg_config"' in text or b'"entries"' in text)


def _rank_of(dump: dict, path: str) -> int | None:
    r = dump.get("rank")
    if isinstance(r, int) and not isinstance(r, bool):
        return r
    m = _RANK_IN_NAME.search(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _doing(entry: dict) -> str:
    """``all_reduce SeqNum 4 (scheduled, input [[1024]]) at train.py:49 main``."""
    op = str(entry.get("profiling_name", "?")).split(":")[-1]
    frames = entry.get("frames") or []
    user = [f for f in frames if isinstance(f, dict) and "/torch/" not in str(f.get("filename", ""))]
    top = (user or frames or [None])[0]
    where = f" at {str(top.get('filename', '?')).rsplit('/', 1)[-1]}:{top.get('line', '?')} {top.get('name', '')}" \
        if isinstance(top, dict) else ""
    return (f"{op} SeqNum {entry.get('collective_seq_id', '?')} ({entry.get('state', '?')}, input "
            f"{entry.get('input_sizes', '?')}){where}").rstrip()


def dump_events(dump: Any, path: str) -> list[Event]:
    """Turn one decoded dump into ``flight_recorder`` events (one per process group).

    Raises:
        InputError: the object is not a Flight Recorder dump (no ``entries`` / ``pg_status``).
    """
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list) or \
            not ("entries" in dump or "pg_status" in dump):
        raise InputError("not a Flight Recorder dump (expected a dict with 'entries' and 'pg_status')", path=path)
    rank = _rank_of(dump, path)
    status = dump.get("pg_status") or {}
    entries = [e for e in dump.get("entries", []) if isinstance(e, dict)]
    by_pg: dict[str, list[dict]] = {}
    for e in entries:
        pg = e.get("process_group")
        key = str(pg[0]) if isinstance(pg, list | tuple) and pg else str(e.get("pg_id", "0"))
        by_pg.setdefault(key, []).append(e)
    out = []
    for n, pg in enumerate(sorted(set(status) | set(by_pg), key=str), start=1):
        st = status.get(pg) if isinstance(status.get(pg), dict) else {}
        evs = sorted(by_pg.get(pg, []), key=lambda e: _int(e.get("collective_seq_id")) or 0)
        last = evs[-1] if evs else None
        enq = _int(st.get("last_enqueued_collective"))
        if enq is None and last is not None:
            enq = _int(last.get("collective_seq_id"))
        fields = {"dump": True, "pg": pg, "last_enqueued": enq, "seq": enq,
                  "last_started": _int(st.get("last_started_collective")),
                  "last_completed": _int(st.get("last_completed_collective")),
                  "entry": _doing(last) if last else "no collective recorded",
                  "timeout_ms": _int(last.get("timeout_ms")) if last else None,
                  "version": str(dump.get("version", "?"))}
        raw = (f"Flight Recorder dump rank {rank if rank is not None else '?'} PG {pg}: last enqueued "
               f"{enq}, completed {fields['last_completed']}; last entry {fields['entry']}")
        out.append(Event("torch", "flight_recorder", path, n, raw, rank=rank, severity="info",
                         fields={k: v for k, v in fields.items() if v is not None}))
    return out


class FlightRecorderParser:
    """Whole-file parser for Flight Recorder dumps (pickle or JSON); no line of a text log is one."""

    name = "flight_recorder"
    source = "torch"
    prefilter = r"^\{\"version\": \"\d+\.\d+\", \"pg_config\""  # only the JSON dump's first line
    keywords = ('"pg_config"',)

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Lines are never Flight Recorder records (dumps are read whole by :meth:`parse_file`)."""
        return None

    def sniff(self, head: bytes) -> bool:
        """See :func:`looks_like_dump`."""
        return looks_like_dump(head)

    def parse_file(self, data: bytes, path: str) -> list[Event]:
        """Decode a whole dump (restricted unpickling, or JSON) into events.

        Raises:
            InputError: malicious or unreadable pickle, bad JSON, not a dump, or larger than
                :data:`MAX_DUMP_BYTES`.
        """
        if len(data) > MAX_DUMP_BYTES:
            raise InputError(f"Flight Recorder dump larger than {MAX_DUMP_BYTES >> 20} MiB", path=path)
        if data[:1] == b"\x80":
            return dump_events(load_restricted(data, path=path), path)
        try:
            return dump_events(json.loads(data.decode("utf-8")), path)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"Flight Recorder JSON dump unreadable ({e})", path=path) from e
