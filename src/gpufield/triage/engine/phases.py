"""Phase markers: which long phase (setup, checkpoint save) a job was in when a timeout fired.

Per-phase timeouts are a hardening lesson of triage.md 5.10: a collective timeout while one rank
tokenises a dataset (case 02) or gathers a full state dict to save it is a *phase* problem, not a
network one. The parsers emit no event for ordinary progress output, so this module scans the raw
lines for a few well-known phase banners (HF ``datasets``/``transformers``, Lightning, DeepSpeed,
Megatron, torch.distributed.checkpoint) and records where each phase began.

:func:`marks_in_block` runs on the blocks ingestion has already read (its ``on_block`` hook, used
by ``analyze``: one read of the inputs): a case-insensitive RE2 search for the literal keywords over
the whole block, so Python only sees candidate lines.
:func:`scan_files` does the same on its own read (plain or gzip/bzip2/xz, whole files);
:func:`scan_text` is the pure, slower reference both must agree with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpufield.triage.parsers import _regex as rx

# HF datasets: "Generating train split: 2230000 examples [29:59, ...]", "Map (num_proc=8):  45%|",
# "Running tokenizer on dataset", "Tokenizing train dataset"; transformers:
# "Loading checkpoint shards:  50%|"; generic "Preprocessing ..." / "Downloading ...".
SETUP = rx.compile(
    r"Generating \w+ split|Running tokenizer|Tokeniz(?:ing|e) |\bMap(?: \(num_proc=\d+\))?:|"
    r"Loading checkpoint shards|Downloading (?:data|shards|builder)|Preprocessing|Filter(?: \(num_proc=\d+\))?:|"
    r"Loading dataset|Building (?:train|dataset|index)|"
    # model construction / sharding frames of a traceback (transformers, FSDP1/2, torch.nn.Module.to)
    r"in from_pretrained|in fully_shard|in _init_param|in _materialize|in to_empty|in init_process_group|"
    r"FullyShardedDataParallel\(|in _init_core_state|in lazy_init",
    ignore_case=True,
)
# model build/shard frames: '  File ".../modeling_utils.py", line 3850, in from_pretrained'
# HF Trainer "Saving model checkpoint to out/checkpoint-500"; DeepSpeed "[Torch] Checkpoint global_step500
# is about to be saved!" / "Saving model checkpoint"; Megatron "saving checkpoint at iteration"; Lightning
# "Saving checkpoint"; torch.distributed.checkpoint dcp.save / FSDP FULL_STATE_DICT gathers.
CKPT_SAVE = rx.compile(
    r"Saving (?:model )?checkpoint|saving checkpoint at iteration|is about to be saved|"
    r"save_checkpoint|save_pretrained|dcp\.save|FULL_STATE_DICT|full_state_dict|state_dict\(\)|"
    r"Failed to clone\(\) tensor|in _save_checkpoint|in save_model|in save_state|save_16bit_model|"
    r"consolidated_16bit_state_dict|gather_16bit_weights_on_model_save|in save_checkpoint|"
    # HF Trainer's end-of-training summary: the final model save runs right after it
    r"'train_runtime'|Training completed\. Do not forget",
    ignore_case=True,
)
# HF Trainer end of training: "{'train_runtime': 119.8, ..., 'train_loss': 1.23, 'epoch': 2.57}" then save_model()
# "successfully saved checkpoint", "Saved checkpoint", "Checkpoint ... saved in 12.3s"
CKPT_DONE = rx.compile(r"successfully saved|Saved (?:model )?checkpoint|checkpoint\S* saved", ignore_case=True)


@dataclass(frozen=True, slots=True)
class PhaseMark:
    """Where a phase banner was seen.

    Attributes:
        file: input file path as given.
        line: 1-based line number.
        phase: ``"setup"``, ``"checkpoint_save"`` or ``"checkpoint_done"``.
        text: the line, stripped.
    """

    file: str
    line: int
    phase: str
    text: str


#: lower-case literals, one of which every banner above contains: found with str.find (C speed), so
#: only candidate lines are matched against the patterns (a 9 MB log scans in well under a second)
_KEYWORDS = ("split", "tokeniz", "map", "checkpoint", "download", "preprocess", "filter", "loading dataset",
             "building", "from_pretrained", "fully_shard", "_init_", "materializ", "to_empty",
             "init_process_group", "fullyshardeddataparallel(", "lazy_init", "about to be saved", "save",
             "state_dict", "clone()", "16bit", "train_runtime", "training completed")
_PRIORITY = ((CKPT_DONE, "checkpoint_done"), (CKPT_SAVE, "checkpoint_save"), (SETUP, "setup"))


def scan_text(text: str, file: str) -> list[PhaseMark]:
    """Return the phase markers of a whole file's text (pure: no I/O).

    Candidate lines come from a literal keyword search; each is then classified by priority
    (done > save > setup), so a line holding two banners gets the stronger one.

    Args:
        text: the file's text.
        file: the file's path, recorded in each mark.
    """
    low = text.lower()
    starts: set[int] = set()
    for kw in _KEYWORDS:
        i = low.find(kw)
        while i >= 0:
            starts.add(low.rfind("\n", 0, i) + 1)
            i = low.find(kw, low.find("\n", i) if low.find("\n", i) >= 0 else len(low))
    out: list[PhaseMark] = []
    line_no, pos = 1, 0
    for start in sorted(starts):
        line_no += text.count("\n", pos, start)
        pos = start
        end = text.find("\n", start)
        line = text[start:end if end >= 0 else len(text)][:4000]
        phase = next((name for pat, name in _PRIORITY if pat.search(line)), None)
        if phase is not None:
            out.append(PhaseMark(file, line_no, phase, line.strip()[:300]))
    return out


def scan_lines(lines: Iterable[str], file: str) -> list[PhaseMark]:
    """Return the phase markers of ``lines`` (pure: no I/O); see :func:`scan_text`."""
    return scan_text("\n".join(lines), file)


def _classify(line: str, file: str, line_no: int) -> PhaseMark | None:
    line = line[:4000]
    phase = next((name for pat, name in _PRIORITY if pat.search(line)), None)
    return None if phase is None else PhaseMark(file, line_no, phase, line.strip()[:300])


def scan_block(block: bytes, file: str, first_line: int = 1) -> list[PhaseMark]:
    """Phase markers of ``block`` (whole lines; its first line is ``first_line`` of ``file``).

    Same result as :func:`scan_text` on the decoded block; candidate lines come from two
    vectorised case-insensitive RE2 passes (chunks, then lines) instead of Python string search.
    """
    return _scan_block(block, len(block), file, first_line)[0]


def _scan_block(block: bytes, end: int, file: str, first_line: int) -> tuple[list[PhaseMark], int]:
    """:func:`scan_block` on ``block[:end]`` without copying it; also returns its newline count."""
    import numpy as np

    if end == 0:
        return [], 0
    nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8, count=end) == 10)
    n = len(nl) + (0 if block[end - 1] == 10 else 1)
    starts = np.append(np.insert(nl + 1, 0, 0)[:n], end).astype(np.int64)
    return marks_in_block(block, starts, n, file, first_line), len(nl)


def marks_in_block(block: bytes, starts, n: int, file: str, first_line: int,
                   firsts: list[int] | None = None) -> list[PhaseMark]:
    """Phase markers of the ``n`` lines ``block[starts[i]:starts[i + 1]]`` (``first_line`` = line of i=0).

    The form ingestion hands to its ``on_block`` hook (``gpufield.triage.ingest.iter_events``), so
    :func:`gpufield.triage.analyze.analyze` finds the banners in the same read as the events.
    ``firsts``: the start offsets of the lines holding a :data:`_KEYWORDS` match (:func:`keyword_pattern`),
    ascending, when the caller found them already (one search shared with the template miner).
    """
    if n == 0:
        return []
    end = int(starts[n])
    find = _keyword_scanner().find
    out = []
    pos = end if firsts is not None else 0
    firsts = [] if firsts is None else firsts
    while pos < end:  # one case-insensitive RE2 search over the block per candidate line
        hit = find(block, pos, end)
        if hit < 0:
            break
        ls = block.rfind(b"\n", 0, hit) + 1
        le = block.find(b"\n", hit, end)
        le = end if le < 0 else le + 1
        firsts.append(ls)
        pos = le
    if not firsts:
        return []
    import numpy as np

    rows = np.searchsorted(np.asarray(starts[: n + 1], dtype=np.int64), np.asarray(firsts, dtype=np.int64),
                           side="right") - 1
    for i in rows.tolist():
        line = block[int(starts[i]):int(starts[i + 1])].decode("utf-8", "replace").rstrip("\n")
        mark = _classify(line, file, first_line + i)
        if mark is not None:
            out.append(mark)
    return out


_SCANNER = None


def keyword_pattern() -> str:
    """The RE2 pattern (searched case-insensitively) of :data:`_KEYWORDS`: a line without a match holds no banner."""
    from gpufield.triage.parsers._scan import _literal

    return "|".join(_literal(k) for k in _KEYWORDS)


def _keyword_scanner():
    """The case-insensitive RE2 scanner of :data:`_KEYWORDS` (built on first use)."""
    global _SCANNER
    if _SCANNER is None:
        from gpufield.triage.parsers._regex import ByteScanner

        _SCANNER = ByteScanner(keyword_pattern(), ignore_case=True)
    return _SCANNER


def scan_files(files: Iterable[str | Path], *, block_bytes: int = 8 << 20) -> list[PhaseMark]:
    """Scan log files (whole, decompressed) for phase markers; unreadable or binary files are skipped.

    Args:
        files: paths as the user gave them (recorded verbatim in the marks).
        block_bytes: read size in bytes.
    """
    from gpufield.triage.ingest import IngestStats, _open

    out: list[PhaseMark] = []
    for f in files:
        opened = _open(str(f), IngestStats())
        if opened is None:
            continue
        stream, _kind, raw = opened
        try:
            carry, line_no, first = b"", 1, True
            while True:
                try:
                    data = stream.read(block_bytes)  # type: ignore[attr-defined]
                except (EOFError, OSError, ValueError):  # truncated compressed stream: keep what was read
                    data = b""
                if first and b"\x00" in data[:8192]:
                    break
                first = False
                block = carry + data if carry else data
                cut = block.rfind(b"\n") + 1 if data else len(block)
                carry = block[cut:] if data else b""
                marks, newlines = _scan_block(block, cut, str(f), line_no)
                out.extend(marks)
                line_no += newlines
                if not data:
                    break
        finally:
            stream.close()  # type: ignore[attr-defined]
            raw.close()  # type: ignore[attr-defined]
    return out
