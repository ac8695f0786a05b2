"""The parser layer's output is frozen: speed work on ingestion must not change one event.

For every shared case (``../shared/data/triage-cases/*.log``), every corpus row of
``tests/triage/corpus/{faults,public,public2}/INDEX.md`` and a generated dense log (the unit of
``benchmarks/triage_scale.py``: the shared cases, a 64-rank NCCL INFO set-up, >4,096 step lines so
the step-time sampling and several read blocks are exercised), this test reads the inputs the way
:func:`gpufield.triage.analyze.analyze` does (one ingestion pass, loss lines thinned by
``LOSS_EVERY``, the ``on_block`` hooks: phase banners, step-time aggregate, template miner) and
compares a SHA-256 digest of each layer with the digest stored in ``digest_data/parsed_events.json``:

* ``events``: every parsed event, all attributes, in order (before the engine's reducer);
  ``nonloss``: the same without the thinned ``loss`` progress events;
* ``steps``: the ``step_time`` summary events of :class:`gpufield.triage.steptime.StepTimes`;
* ``marks``: the phase marks of :func:`gpufield.triage.engine.phases.marks_in_block`;
* ``mined``: the template miner's templates;
* ``stats``: lines, bytes, events and truncated lines read, and the ingestion warnings.

Only the parser layer is digested (not the engine's incidents), so engine rule changes do not move
it. A change that is *meant* to alter parsed events (a new parser pattern) must regenerate the file,
and the reviewer must look at the diff of the printed per-case digests::

    PYTHONPATH=src /work/main/.venv/bin/python tests/triage/test_parsed_digest.py --regenerate

The stored digests were made with that command on main at cf02b31 (before the ingestion speed work
of issue 24). The dense log is also read with a 64 KiB read block: every layer but the loss
series (whose thinning keeps the last loss line of each block by design) must equal the 8 MiB one
(records, step lines and mined lines across block boundaries).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from _corpus_checks import load_benchmark as _load

from gpufield.triage.analyze import LOSS_EVERY
from gpufield.triage.engine.phases import marks_in_block
from gpufield.triage.ingest import IngestOptions, ingest
from gpufield.triage.miner import TemplateMiner
from gpufield.triage.steptime import StepTimes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"
SHARED_CASES = ROOT.parent / "shared" / "data" / "triage-cases"
DIGESTS = HERE / "digest_data" / "parsed_events.json"
YEAR = 2026
#: size of the generated dense log (bytes): 6 units of ~800 kB, ~19,000 step lines
DENSE_BYTES = 4_000_000




def _canon(x):
    """A JSON-stable form of event attributes (floats by repr, tuples as lists, dict keys sorted)."""
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x
        return [_canon(v) for v in items]
    return x


def _event(e) -> list:
    return [_canon(getattr(e, k)) for k in e.__slots__]


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=True).encode()).hexdigest()[:20]


def layers(paths: list[Path], *, block_bytes: int = 8 << 20, root: Path = ROOT, workers: int = 1,
           stats_out: list | None = None) -> dict[str, str]:
    """Digest per layer of one read of ``paths`` (file names relative to ``root``, so digests do not
    depend on where the checkout lives)."""
    events: list = []
    marks: list = []
    miner = TemplateMiner(year=YEAR)
    steps = StepTimes(year=YEAR)

    def on_block(path, block, starts, n, base):
        marks.extend(marks_in_block(block, starts, n, path, base + 1))
        steps.on_block(path, block, starts, n, base)
        miner.on_block(path, block, starts, n, base)

    def sink(e):
        events.append(e)
        miner.note_event(e)

    res = ingest([str(p) for p in paths], on_block=on_block, sink=sink,
                 options=IngestOptions(year=YEAR, with_loss=True, loss_every=LOSS_EVERY, block_bytes=block_bytes,
                                       workers=workers))
    miner.finish()
    st = res.stats
    if stats_out is not None:
        stats_out.append(st)
    # only the inputs' own locations: the checkout's tests/ folder (corpus rows, temporary dense logs live under
    # root) and ../shared. Log text holds other absolute paths (the fault runs' tracebacks name the venv and
    # worktree they ran in) that must stay as the file has them, wherever the checkout lives
    prefixes = tuple(str(root) + "/" + d + "/" for d in ("tests",)) + (str(ROOT.parent / "shared") + "/",)
    if root != ROOT:  # a temporary folder holding generated inputs (the dense log)
        prefixes += (str(root) + "/",)

    def rel(obj):
        text = json.dumps(obj)
        for prefix in prefixes:
            text = text.replace(prefix, "tests/" if prefix.endswith("/tests/") else "")
        return json.loads(text)

    return {
        "events": _h(rel([_event(e) for e in events])),
        "nonloss": _h(rel([_event(e) for e in events if e.kind != "loss"])),
        "steps": _h(rel([_event(e) for e in steps.events()])),
        "marks": _h(rel([[m.file, m.line, m.phase, m.text] for m in marks])),
        "mined": _h(rel([_canon(t.to_dict()) for t in miner.templates()])),
        "stats": _h(rel([st.lines, st.bytes, st.events, st.truncated_lines, sorted(str(w) for w in st.warnings)])),
    }


def cases() -> dict[str, list[Path]]:
    """Case key -> its input paths: every shared case, every corpus row."""
    out: dict[str, list[Path]] = {}
    if SHARED_CASES.is_dir():
        for p in sorted(SHARED_CASES.glob("*.log")):
            out[f"shared/{p.name}"] = [p]
    ev = _load("triage_eval_corpus")
    for sub in ("faults", "public", "public2"):
        for r in ev.read_index(CORPUS / sub / "INDEX.md"):
            out[f"corpus/{sub}/{r.id}"] = list(r.paths)
    return out


def dense_log(path: Path) -> Path:
    """The benchmark's dense log, cut to :data:`DENSE_BYTES` (deterministic: fixed seed)."""
    scale = _load("triage_scale")
    scale.build(path, DENSE_BYTES // 1_000_000)
    return path


def compute(tmp: Path) -> dict[str, dict[str, str]]:
    """Every digest this test checks (the ``--regenerate`` content)."""
    out = {k: layers(v) for k, v in cases().items()}
    if SHARED_CASES.is_dir():
        out["dense/4MB"] = layers([dense_log(tmp / "dense.log")], root=tmp)
    return out


@pytest.fixture(scope="module")
def stored() -> dict[str, dict[str, str]]:
    return json.loads(DIGESTS.read_text(encoding="utf-8"))["digests"]


def test_every_case_has_a_stored_digest(stored):
    missing = sorted(set(cases()) - set(stored))
    assert not missing, f"cases without a stored digest (regenerate, see the module docstring): {missing}"


def test_corpus_and_shared_cases_parse_as_stored(stored):
    got = {k: layers(v) for k, v in cases().items()}
    changed = {k: [layer for layer in v if stored.get(k, {}).get(layer) != v[layer]] for k, v in got.items()}
    changed = {k: v for k, v in changed.items() if v}
    assert not changed, f"parsed output changed (case: layers): {changed}"
    assert len(got) >= 150  # 27 shared + ~130 corpus rows: the set is not silently empty


def test_dense_log_parses_as_stored_at_two_block_sizes(stored, shared_dir, tmp_path):
    log = dense_log(tmp_path / "dense.log")
    big = layers([log], root=tmp_path)
    assert big == stored["dense/4MB"]
    small = layers([log], block_bytes=64 << 10, root=tmp_path)
    by_block = {"events", "stats"}  # loss lines kept per block, and their count
    assert {k: v for k, v in small.items() if k not in by_block} == {k: v for k, v in big.items() if k not in by_block}


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: PYTHONPATH=src python {Path(__file__).relative_to(ROOT)} --regenerate")
    import subprocess

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as d:
        digests = compute(Path(d))
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps({"made_by": f"PYTHONPATH=src python {Path(__file__).relative_to(ROOT)} --regenerate",
                                   "commit": rev, "digests": digests}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for k, v in sorted(digests.items()):
        print(k, " ".join(f"{layer}={h}" for layer, h in v.items()))


def test_two_processes_give_the_same_layers(shared_dir, tmp_path, monkeypatch):
    # IngestOptions(workers=2): the helper process parses most stretches of the file; every layer
    # (events in order, step times, marks, mined templates, warnings) must equal the one-process read
    from gpufield.triage import _split

    log = dense_log(tmp_path / "dense.log")
    bb = 64 << 10  # ~60 read blocks: many stretches, records and step lines across their boundaries
    monkeypatch.setattr(_split, "MIN_BYTES", 1 << 20)
    one = layers([log], block_bytes=bb, root=tmp_path)
    got: list = []
    two = layers([log], block_bytes=bb, root=tmp_path, workers=2, stats_out=got)
    assert two == one
    fs = got[0].files[0]
    assert fs.helper_blocks >= 20, (fs.helper_blocks, fs.helper_stop)  # the helper did parse most of it


def test_two_processes_fall_back_exactly_when_a_record_spans_a_stretch(tmp_path, monkeypatch):
    # torchrun ChildFailedError blocks are multi-line records; one open across a stretch boundary
    # makes this process parse that stretch itself (the helper's events for it are dropped)
    from gpufield.triage import _split

    bb = 16 << 10
    text = (HERE / "data" / "torchrun_blocks.log").read_text()
    f = tmp_path / "records.log"
    f.write_text(text * (400_000 // len(text) + 1))  # records all through the file
    monkeypatch.setattr(_split, "MIN_BYTES", 1 << 16)
    one = layers([f], block_bytes=bb, root=tmp_path)
    got: list = []
    two = layers([f], block_bytes=bb, root=tmp_path, workers=2, stats_out=got)
    assert two == one
    fs = got[0].files[0]
    assert fs.helper_stop == "a record open at the stretch boundary" and fs.helper_redone >= 1
    assert fs.helper_blocks > 0  # and the helper took the stretches after it again
