"""Run a VNN-COMP benchmark directory (``instances.csv``) and score it against published results.

Rows are appended and flushed one by one (an interrupted run keeps what it finished; ``resume``
skips rows already in the CSV). ``.gz`` models and properties are decompressed once into a
cache directory next to the results file, keyed on the source's content hash and re-checked
before reuse. With a reference results CSV (e.g.
``alpha_beta_crown_mnist_fc_results.csv`` from VNN-COMP 2022) the summary counts agreement and
*wrong* answers: our ``unsat`` where the reference has ``sat`` or vice versa; rows are matched
on (benchmark, onnx, vnnlib), the benchmark being this directory's name.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from gpufield._files import atomic_write, check_output
from gpufield.errors import GpufieldError, InputError
from gpufield.verify.deadline import Deadline, ResultSeal
from gpufield.verify.io.results import ResultsWriter, instance_key, read_instances, read_results
from gpufield.verify.runner import VerifyConfig, verify_instance


@dataclass
class BenchSummary:
    """Counts of one benchmark run.

    Attributes:
        counts: verdict -> number of instances (this run plus resumed rows).
        total_s: wall seconds of the instances run now.
        reference_counts: verdict -> count in the reference (same instances), if given.
        agree: decided by both with the same answer.
        wrong: decided by both with opposite answers (must be 0).
        wrong_instances: ``onnx,vnnlib`` of each wrong answer.
        rows: ``(onnx, vnnlib, result, seconds)`` per instance in CSV order.
        margins: per row, the verifier's margins and counters (``VerifyResult.margins``: stage
            margins, ``bab_domains``, ``bab_lb``, ``mip_s``; empty for resumed or failed rows).
    """

    counts: dict[str, int] = field(default_factory=dict)
    total_s: float = 0.0
    reference_counts: dict[str, int] | None = None
    agree: int = 0
    wrong: int = 0
    wrong_instances: list[str] = field(default_factory=list)
    rows: list[tuple[str, str, str, float]] = field(default_factory=list)
    margins: list[dict[str, float]] = field(default_factory=list)

    def to_json(self) -> str:
        """JSON text of the summary."""
        return json.dumps(asdict(self), indent=2)


def _sha256(p: Path, memo: dict) -> str:
    """Content hash of ``p``, computed once per (path, size, mtime) in this process."""
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in memo:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        memo[key] = h.hexdigest()
    return memo[key]


def _materialise(bench_dir: Path, rel: str, cache: Path, memo: dict | None = None) -> Path:
    """The listed file itself, or for ``.gz`` its decompressed copy in ``cache``.

    The copy lives under the sha256 of the compressed source (a replaced source gets a new copy,
    never an old one), and a cached copy is used only if its own sha256 still equals the one
    recorded when it was written (``<copy>.sha256``); otherwise it is decompressed again.
    """
    memo = {} if memo is None else memo
    p = bench_dir / rel
    if not p.exists() and (bench_dir / (rel + ".gz")).exists():
        p = bench_dir / (rel + ".gz")
    if p.suffix != ".gz":
        if not p.exists():
            raise InputError(f"listed file {rel} does not exist", path=str(bench_dir / "instances.csv"))
        return p
    rel_out = p.relative_to(bench_dir).with_suffix("")
    slot = cache / rel_out  # one directory per listed file, holding one copy per source hash
    out = slot / _sha256(p, memo)[:32] / rel_out.name
    stamp = out.with_name(out.name + ".sha256")
    if out.exists() and stamp.exists() and stamp.read_text().strip() == _sha256(out, memo):
        return out
    if slot.is_dir():  # copies of earlier contents of this source are stale
        for old in slot.iterdir():
            if old.name != out.parent.name and old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f"{out.name}.{os.getpid()}.part")
    h = hashlib.sha256()
    try:
        with gzip.open(p) as src, open(part, "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
    except (OSError, EOFError) as e:  # a truncated or corrupt .gz
        part.unlink(missing_ok=True)
        raise InputError(f"cannot decompress {rel}: {e}", path=str(p)) from e
    part.replace(out)
    stamp.write_text(h.hexdigest() + "\n")
    return out


def bench(bench_dir: str | Path, out_csv: str | Path, *, reference: str | Path | None = None,
          config: VerifyConfig | None = None, max_instance_s: float | None = None,
          resume: bool = False, force: bool = False, limit: int | None = None,
          total_budget_s: float | None = None, progress: bool = True,
          select: str | None = None, instance_s: float | None = None) -> BenchSummary:
    """Run every instance of ``bench_dir/instances.csv``.

    Args:
        bench_dir: benchmark directory (holds ``instances.csv``, ``onnx/``, ``vnnlib/``).
        out_csv: results CSV to write (VNN-COMP columns).
        reference: a published results CSV to compare with.
        config: verifier settings.
        max_instance_s: cap on each instance's timeout (seconds), for bounded total time.
        resume: keep an existing ``out_csv`` and skip its rows.
        force: overwrite an existing ``out_csv``.
        limit: run only the first ``limit`` instances.
        total_budget_s: wall-clock budget for the whole run; each instance's timeout is also
            capped at the remaining budget divided by the instances left.
        progress: show a rich progress bar.
        select: regular expression; only instances whose ``onnx,vnnlib`` text matches run
            (``re.search``).
        instance_s: replaces the CSV's per-instance timeout (seconds), e.g. a long attempt at an
            instance nobody decided; ``max_instance_s`` and ``total_budget_s`` still cap it.

    Returns:
        :class:`BenchSummary`; also written as ``<out_csv>.summary.json``.

    Raises:
        InputError: missing ``instances.csv``/files, a non-finite timeout in it, or ``out_csv``
            exists without resume/force.
        InputError: also for a non-finite or negative ``max_instance_s``/``instance_s``/``total_budget_s``.
    """
    for arg, v in (("max_instance_s", max_instance_s), ("instance_s", instance_s), ("total_budget_s", total_budget_s)):
        if v is not None and not (math.isfinite(v) and v >= 0):  # nan would pass every min() cap
            raise InputError(f"{arg}={v} must be a finite number of seconds >= 0")
    bench_dir, out_csv = Path(bench_dir), Path(out_csv)
    instances = read_instances(bench_dir / "instances.csv")
    if select is not None:
        import re

        pat = re.compile(select)
        instances = [i for i in instances if pat.search(f"{i.onnx},{i.vnnlib}")]
    instances = instances[:limit]
    done: dict[tuple[str, str], str] = {}
    check_output(out_csv, force=True, inputs=[bench_dir / "instances.csv", *([reference] if reference else [])],
                 option="--out")  # never unlinks or appends to a device, FIFO, symlink or an input
    if out_csv.exists():
        if resume:
            done = read_results(out_csv)
        elif force:
            out_csv.unlink()
        else:
            raise InputError("results file exists; pass --resume or --force", path=str(out_csv))
    ref = read_results(reference) if reference else None
    name = bench_dir.name
    if ref is not None and instances and not any(instance_key(name, i.onnx, i.vnnlib) in ref for i in instances):
        print(f"warning: no instance of benchmark {name!r} is in the reference {reference} (benchmarks "
              f"there: {', '.join(sorted({k[0] for k in ref})) or 'none'}); nothing will be compared",
              file=sys.stderr)
    memo: dict = {}
    grace_s = (config or VerifyConfig()).grace_s
    cache = out_csv.parent / (out_csv.stem + "_inputs")
    writer = ResultsWriter(out_csv, append=True)
    summary = BenchSummary()
    prog = None
    if progress:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), transient=False)
        prog.start()
        task = prog.add_task(f"verify {name}", total=len(instances))
    t_start = time.monotonic()
    try:
        for i, inst in enumerate(instances):
            key = instance_key(name, inst.onnx, inst.vnnlib)
            margins: dict[str, float] = {}
            if key in done:
                result, secs = done[key], 0.0
            else:
                timeout = inst.timeout_s if instance_s is None else instance_s
                timeout = timeout if max_instance_s is None else min(timeout, max_instance_s)
                if total_budget_s is not None:
                    left = total_budget_s - (time.monotonic() - t_start)
                    timeout = max(0.0, min(timeout, left / (len(instances) - i)))
                t0 = time.monotonic()
                dl = Deadline.after(timeout, start_s=t0)

                def late(inst=inst, t0=t0):  # no verdict by the deadline + grace: the row says timeout
                    writer.write(name, inst.onnx, inst.vnnlib, 0.0, "timeout", time.monotonic() - t0)

                with ResultSeal(dl.end_s + grace_s, late) as seal:
                    try:
                        onnx_p = _materialise(bench_dir, inst.onnx, cache, memo)
                        vnn_p = _materialise(bench_dir, inst.vnnlib, cache, memo)
                        res = verify_instance(onnx_p, vnn_p, timeout_s=timeout, config=config, deadline=dl)
                        result, margins = res.verdict, dict(res.margins)
                    except GpufieldError as e:
                        result = "error"
                        print(f"{inst.onnx},{inst.vnnlib}: {e}", file=sys.stderr)
                    except Exception as e:  # an internal bug: record it, keep the other instances
                        result = "error"
                        print(f"{inst.onnx},{inst.vnnlib}: internal error {type(e).__name__}: {e}", file=sys.stderr)
                    secs = time.monotonic() - t0
                    if not seal.finish(partial(writer.write, name, inst.onnx, inst.vnnlib, 0.0, result, secs)):
                        print(f"{inst.onnx},{inst.vnnlib}: no verdict by the deadline + {grace_s:g} s; recorded "
                              f"timeout (the verifier answered {result} after {secs:.2f} s)", file=sys.stderr)
                        result, margins = "timeout", {}
                summary.total_s += secs
            summary.rows.append((inst.onnx, inst.vnnlib, result, secs))
            summary.margins.append(margins)
            summary.counts[result] = summary.counts.get(result, 0) + 1
            if ref is not None and key in ref:
                theirs = ref[key]
                if result in ("sat", "unsat") and theirs in ("sat", "unsat"):
                    if result == theirs:
                        summary.agree += 1
                    else:
                        summary.wrong += 1
                        summary.wrong_instances.append(f"{inst.onnx},{inst.vnnlib}")
            if prog is not None:
                prog.update(task, advance=1, description=f"verify {name} {dict(summary.counts)}")
    finally:
        writer.close()
        if prog is not None:
            prog.stop()
    if ref is not None:
        keys = [instance_key(name, i.onnx, i.vnnlib) for i in instances]
        summary.reference_counts = dict(Counter(ref[k] for k in keys if k in ref))
    atomic_write(Path(str(out_csv) + ".summary.json"), summary.to_json(), force=True)
    return summary
