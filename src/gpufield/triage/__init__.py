"""gpufield.triage: find the root incident behind a failed multi-node job, and what to do about it.

Quick start::

    $ gpufield triage                      # the bundled example: two hosts x 8 ranks, Xid 79 on host B
    $ journalctl -k -o json | gpufield triage          # piped stdin is read (also: gpufield triage -)
    $ gpufield triage /logs/job-1234/ --html report.html --db events.duckdb
    $ gpufield triage node-a.log node-b-dmesg.txt --json
    $ gpufield triage eval ../shared/data/triage-cases      # score against a labelled corpus

From Python::

    from gpufield.triage import analyze, dumps
    result = analyze(["/logs/job-1234"])
    top = result.verdict               # Incident: cls, root_cause, confidence, action, evidence
    print(top.cls, top.host, top.gpu, top.action)

**What it reads.** Kernel logs (dmesg, ``dmesg -T``, journal, syslog: NVRM Xid, fallen off the bus,
reset required, PCIe AER, OOM killer), NCCL INFO/WARN lines (IB completion errors, socket errors),
PyTorch ProcessGroupNCCL watchdog/heartbeat/Flight Recorder lines, torchrun ChildFailedError blocks,
CUDA/allocator errors, training output (loss, NaN, fp16 overflow), nvidia-smi dumps, DCGM text;
``journalctl -o json`` exports; plain, gzip, bzip2 or xz (by magic bytes). Inputs
(:mod:`gpufield.triage.inputs`): a *list* of paths (a bare ``str`` is refused: it would be read
character by character), ``-`` = standard input; with no path, piped standard input is read and the
bundled example runs only when stdin is a terminal; a missing path among several is an error
unless ``allow_missing=True`` (``--allow-missing``); a named pipe without a writer is refused after
``inputs.FIFO_WAIT_S`` seconds instead of blocking.

**Which host a line is from.** The line's own prefix (syslog / journal / RFC 5424 hostname, NCCL
``host:pid:tid``, torchrun ``host :``), else the host all other lines of its file name, else a
folder of its path that is a known hostname, else - for files that name no host at all (``dmesg -T``,
raw ``dmesg``) - the nearest folder *below the directory given* whose name looks like a hostname
(``job/gpu-b17/dmesg.txt`` -> ``gpu-b17``; generic names such as ``logs``, ``kernel``, ``job-12``,
``rank3`` or dates never count; see ``analyze.folder_host``). When none applies the action names the
file whose host is meant. A PCI bus id is joined to a rank through NCCL ``Init COMPLETE ... busId`` lines.

**How it decides** (``../shared/reference/triage.md`` section 5.6):

1. Events are put on one timeline. Cross-host clock skew is estimated from watchdog timeouts of the
   same collective (same SeqNum) on several hosts; events without a timestamp keep file order.
2. An explicit, ordered rule table (``gpufield.triage.engine.rules.RULES``) turns events into
   findings, each with a class of the triage.md 5.3 taxonomy, a causal tier and its evidence lines.
3. Findings are ordered by causal prior - hardware > fabric > host > process > NCCL remote/system
   errors > watchdog/heartbeat > torchrun teardown - then by corrected time. Later, higher-tier
   findings consistent with a root (entity, time window) are folded into it as its *cascade*, with
   same-message copies across ranks deduplicated and counted. Only findings inside the failure
   episode ``[first job-side anomaly - 1 h, last job-side line + 5 min]`` can be the root; a Xid
   hours after the job died, or the day before, is reported as a separate low-confidence context
   incident (``engine.incidents.episode_window``).
4. When only cascades exist (watchdog timeouts, broken pipes, ChildFailedError), the incident's
   class names the symptom but its ``root_cause`` is ``UNKNOWN`` and ``next_evidence`` says what to
   collect (Flight Recorder, dmesg of the missing rank's host, ...).

**Confidence** is a calibrated-ish probability that the incident's class names the *root cause*,
i.e. that acting on it addresses the failure: 0.95 when host-side and job-side evidence agree (the
one rank that never reported runs on the GPU the kernel blames); 0.9 a catalogued code/message with
the blamed host or GPU identified; 0.8 the same without an entity; ~0.65 an inference across events (SeqNum mismatch,
setup barrier); ~0.45-0.5 a class chosen by prior with corroboration missing (SIGKILL without an
OOM-killer line); 0.3-0.4 cascade-only evidence (the class names the symptom; root UNKNOWN).
``gpufield triage eval`` prints class accuracy per confidence bin; low-confidence cascade-only cases
are expected to be labelled correctly there (the label is the symptom), so that table checks the
high bins only.

**Actions** (``action_kind``): ``RETRY`` (transient/unknown, once, with evidence turned on),
``EXCLUDE_NODE`` (hardware on a host), ``RESET_GPU``, ``FIX_CONFIG`` (change the job's configuration,
code or data before rerunning: a desync, an uncaught exception, an OOM) or ``STOP`` (do not rerun
until a person has looked: silently skipped steps, a restart loop, a job a person cancelled).
Configuration, code and data classes are never retried blindly (triage.md 5.10). The texts are data
(``gpufield/triage/data/actions.toml``): a default per class and variants chosen by what the
evidence showed (a ``/dev/shm`` permission error gets ``chmod``, IPv4-mapped RoCE GIDs do not get
the GID-index fix, a NaN loss that recovers asks for fp32 weights).

**Outputs.** ``render`` prints one screen; ``dumps`` gives JSON (schema in
``gpufield.triage.report.json_export``; ``incidents`` most likely root first, each with ``class``,
``confidence``, ``action``, ``root`` {host, rank, gpu, file, line}, ``cascade_count``, ``evidence``);
``write_html`` writes one self-contained page (timelines by host and rank on skew-corrected and raw
times, the blamed host / rank / GPU highlighted, a legend, Xid and telemetry charts, evidence with
file:line); ``store_result`` adds the run to a DuckDB store (schema and queries:
``docs/triage-store.md``). Outputs go through a temporary file and a rename; existing files are
never replaced unless ``force=True`` (``--force``), and never when they are devices, FIFOs,
symbolic links or inputs.

**Lower level.** ``ingest(paths)`` / ``iter_events(paths)`` give the parsed :class:`Event` stream
without the engine (``IngestOptions``: year, UTC offset, loss lines; ``IngestResult.stats`` is an
``IngestStats``). ``xid_info``, ``ib_status`` and ``nccl_result`` look codes up in the bundled
catalogues (NVIDIA Xid catalogue, ``ibv_wc_status``, ``ncclResult_t``; sources in ``data/SOURCES.json``).

**Evaluation.** ``evaluate(dir)`` scores the engine against a corpus whose ``INDEX.md`` labels each
case; see :mod:`gpufield.triage.evaluate` for the label grammar (chains ``A → B``, lists ``A and B``).
"""

from __future__ import annotations

from gpufield.triage.analyze import TriageResult, analyze, check_writable, example_dir, store_events
from gpufield.triage.catalog import ib_status, nccl_result, xid_info
from gpufield.triage.engine.actions import ACTION_KINDS, NO_RETRY
from gpufield.triage.engine.model import TAXONOMY, EvidenceLine, Incident
from gpufield.triage.evaluate import EvalReport, evaluate, parse_index
from gpufield.triage.events import KINDS, SOURCES, Event
from gpufield.triage.ingest import IngestOptions, IngestResult, IngestStats, ingest, iter_events
from gpufield.triage.report import dumps, one_line, render, render_html, to_dict, write_html
from gpufield.triage.report.eval_view import render_eval
from gpufield.triage.store import store_result

__all__ = [
    "ACTION_KINDS", "EvalReport", "Event", "EvidenceLine", "Incident", "IngestOptions", "IngestResult",
    "IngestStats", "KINDS", "NO_RETRY", "SOURCES", "TAXONOMY", "TriageResult", "analyze", "check_writable",
    "dumps", "evaluate", "example_dir", "ib_status", "ingest", "iter_events", "nccl_result", "one_line",
    "parse_index", "render", "render_eval", "render_html", "store_events", "store_result", "to_dict", "write_html", "xid_info",
]
