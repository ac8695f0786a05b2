"""Training-loop parser: NaN/Inf loss, fp16 loss-scale overflow, skipped steps, restart loops,
straggler tables and findings; optional finite-loss lines.

Formats: DeepSpeed ``runtime/fp16/loss_scaler.py`` / ``stage_1_and_2.py`` (``OVERFLOW! Rank 0
Skipping step. Attempted loss scale: X, reducing to Y``), ``[Rank 0] step=2, skipped=2, ...``
(``log_dist``), Apex ``Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to Y``,
nanoGPT/litgpt ``iter 16 step 1: loss nan``, Megatron-LM rerun machine, traceml findings.
Reference: ``../shared/reference/triage.md`` §2.11 and corpus cases 24, 25, 33, 34.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import at_line, event, prefix_of, to_float, to_int
from gpufield.triage.protocols import LineContext

# [2022-02-16 01:23:00,852] [INFO] [stage_1_and_2.py:1644:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4294967296, reducing to 2147483648.0
# [2021-01-26 22:04:09,191] [INFO] [logging.py:60:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 8.0, reducing to 4.0
# [INFO] [unfused_optimizer.py:202:step] [deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss
#   scale: 1, reducing to 1          (DeepSpeed runtime/fp16/fused_optimizer.py and unfused_optimizer.py, FP16_Optimizer)
OVERFLOW_RE = rx.compile(
    r"(?:OVERFLOW! Rank (?P<rank>\d+) Skipping step|Overflow detected\. Skipping step|"
    r"fp16 dynamic loss scale overflow! Skipping step)\. "
    r"Attempted loss scale: (?P<old>[\d.eE+-]+), reducing to (?P<new>[\d.eE+-]+)")
# Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0        (Apex amp)
APEX_RE = rx.compile(r"Gradient overflow\.\s+Skipping step, loss scaler \d+ reducing loss scale to (?P<new>[\d.eE+-]+)")
# [Rank 0] step=2, skipped=2, lr=[0.0001, 0.0001], mom=[(0.85, 0.99), (0.85, 0.99)]
SKIPPED_RE = rx.compile(r"\bstep=(?P<step>\d+), skipped=(?P<skipped>[1-9]\d*)")
# iter 16 step 1: loss nan, train time: 1405.01ms    /   'loss': nan   /   loss=inf   /  Loss is NaN
NAN_RE = rx.compile(
    r"\b(?P<metric>(?:\w+_)?loss|grad_norm|grad norm|Loss)\b['\"]?\s*(?:[:=]|is)?\s*(?:tensor\()?"
    r"(?P<val>[-+]?(?:nan|NaN|NAN|inf|Inf|Infinity))\b")
STEP_RE = rx.compile(r"\b(?:global_step|steps?)\b[\s:=]*(?P<step>\d+)")
ITER_RE = rx.compile(r"\biter(?:ation)?\b[\s:=]*(?P<iter>\d+)")
# steps: 1 loss: 11.4926 iter time (s): 36.217     /    iter 13 step 0: loss 1.9210, train time: 1410.36ms
LOSS_RE = rx.compile(r"\b(?P<metric>(?:\w+_)?loss)\b['\"]?\s*[:=]?\s*(?P<val>[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?)\b")
# Got rescheduled on the same GPU. Need to resume again from the same checkpoint          (Megatron-LM rerun machine)
# Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.   (DeepSpeed
# runtime/fp16/loss_scaler.py DynamicLossScaler, raised when the scale would go below min_scale)
SCALE_MIN_RE = rx.compile(r"Current loss scale already at minimum")
# Megatron-LM's NaN guard on the gradient norm raises and stops the run (it is not a printed metric):
#   AssertionError: Rank 11: found NaN in local grad norm in backward pass before data-parallel communication
#     collective. Device: 3, node: set-zw04-kubernetes-pc133.mt        (core/distributed/param_and_grad_buffer.py)
#   AssertionError: Rank 3: found NaN in local grad norm in backwards pass. Device: 3, node: <host>  (older optimizer)
#   Rank 7, node ed04b71d5c00, device 7, iteration -1: Unexpected result nan (message='found NaN in local grad norm
#     for bucket #0 in backward pass ...                                (rerun_state_machine, Megatron-Core >= 0.9)
NAN_CHECK_RE = rx.compile(r"found (?P<val>NaN|Inf|nan|inf) in local grad norm")
NAN_CHECK_WHO_RE = rx.compile(r"\bRank (?P<rank>\d+)[:,]|[Dd]evice:? (?P<dev>\d+)|\bnode:? (?P<node>[\w.-]*\w)")
RESTART_RE = rx.compile(r"rescheduled on the same (?:GPU|node)|[Rr]estarting (?:the )?(?:job|training|run)\b|[Rr]esuming from (?:the )?same checkpoint")
# INPUT_STRAGGLER: Rank r2 input wait was 199.7ms vs median rank r0 at 10.4ms.
# COMPUTE_BOUND: Model compute took 346.4ms of a 362.1ms average step.
FINDING_RE = rx.compile(r"^\s*(?P<finding>[A-Z][A-Z0-9]*_(?:[A-Z0-9_]*_)?(?:STRAGGLER|BOUND|STALL|SLOW)[A-Z0-9_]*): (?P<msg>.*?)\s*$")
FINDING_RANK_RE = rx.compile(r"Rank r?(?P<rank>\d+) [\w ]*? was (?P<v>[\d.]+) ?ms vs median rank r?(?P<mr>\d+) at (?P<med>[\d.]+) ?ms")
FINDING_TOOK_RE = rx.compile(r"took (?P<v>[\d.]+) ?ms of an? (?P<t>[\d.]+) ?ms")
# rank,backward_ms      then rows "0,293.0"
TABLE_HEAD_RE = rx.compile(r"^rank,(?P<metric>\w+_ms)\s*$")
TABLE_ROW_RE = rx.compile(r"^(?P<rank>\d+),(?P<v>[-+\d.eE]+)\s*$")


class TrainParser:
    """Training-progress incidents (non-finite loss, loss-scale collapse, restarts, stragglers)."""

    name = "train"
    source = "train"
    prefilter = (r"\b(?:nan|NaN|NAN|inf|Inf|Infinity)\b|OVERFLOW!|Overflow detected|Gradient overflow|scale overflow!|"
                 r"skipped=[1-9]|in local grad norm|Current loss scale already at minimum|rescheduled on the same|[Rr]estarting (?:the )?(?:job|training|run)|"
                 r"same checkpoint|_(?:[A-Z0-9_]*_)?(?:STRAGGLER|BOUND|STALL|SLOW)[A-Z0-9_]*: |^rank,\w+_ms\s*$")
    keywords = ("nan", "NaN", "NAN", "inf", "Inf", "OVERFLOW!", "Overflow detected", "Gradient overflow", "scale overflow!",
                *(f"skipped={d}" for d in range(1, 10)),
                "in local grad norm", "Current loss scale already at minimum", "rescheduled on the same", "estarting ", "same checkpoint", "STRAGGLER", "_BOUND", "_STALL", "_SLOW",
                "rank,")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one training-loop line (see module docstring)."""
        m = OVERFLOW_RE.search(line) or APEX_RE.search(line)
        if m:
            pre = prefix_of(line, ctx)
            old = to_float(m["old"]) if "old" in m.re.groupindex else None
            rank = to_int(m["rank"]) if "rank" in m.re.groupindex else None
            return event("train", "loss_scale_overflow", ctx, line, pre, severity="warning", rank=rank,
                         code=m["new"], fields={"loss_scale": old, "new_loss_scale": to_float(m["new"]),
                                                "step": _step(line)})
        if SCALE_MIN_RE.search(line):
            return event("train", "loss_scale_overflow", ctx, line, prefix_of(line, ctx), severity="error",
                         fields={"at_minimum": True, "step": _step(line)})
        m = NAN_CHECK_RE.search(line)
        if m:  # a framework's non-finite check that raised: fatal, unlike a printed NaN grad-norm
            who: dict[str, str] = {}
            for w in NAN_CHECK_WHO_RE.finditer(line):
                who.update({k: v for k, v in w.groupdict().items() if v and k not in who})
            return event("train", "nan_loss", ctx, line, prefix_of(line, ctx), severity="error", code=m["val"],
                         rank=to_int(who.get("rank")), host=who.get("node"), gpu_index=to_int(who.get("dev")),
                         fields={"value": m["val"], "metric": "grad_norm", "is_loss": False, "fatal": True,
                                 "step": _step(line), "check": "local grad norm"})
        m = SKIPPED_RE.search(line)
        if m:
            return event("train", "skipped_step", ctx, line, prefix_of(line, ctx), severity="warning",
                         fields={"step": int(m["step"]), "skipped": int(m["skipped"])})
        m = NAN_RE.search(line)
        if m:
            it = ITER_RE.search(line)
            is_loss = "loss" in m["metric"].lower()
            fin = None if is_loss else LOSS_RE.search(line)  # a finite loss printed beside a NaN grad-norm
            return event("train", "nan_loss", ctx, line, prefix_of(line, ctx),
                         severity="error" if is_loss else "warning", code=m["val"],
                         fields={"value": m["val"], "metric": m["metric"], "step": _step(line),
                                 "iter": to_int(it and it["iter"]), "is_loss": is_loss,
                                 "finite_loss": to_float(fin["val"]) if fin else None})
        m = RESTART_RE.search(line)
        if m:
            return event("tool", "restart_loop", ctx, line, prefix_of(line, ctx), severity="warning",
                         fields={"message": line[m.start():].strip(), "count": None})
        m = FINDING_RE.search(line)
        if m:
            f: dict = {"finding": m["finding"], "message": m["msg"]}
            rank = None
            r = FINDING_RANK_RE.search(m["msg"])
            if r:
                rank = int(r["rank"])
                f.update(value_ms=float(r["v"]), step_ms=float(r["v"]), median_ms=float(r["med"]),
                         median_rank=int(r["mr"]))
            t = FINDING_TOOK_RE.search(m["msg"])
            if t:
                f.update(value_ms=float(t["v"]), total_ms=float(t["t"]))
            return event("tool", "straggler_finding", ctx, line, prefix_of(line, ctx), code=m["finding"],
                         severity="warning", rank=rank, fields=f)
        return None

    # --- per-rank timing table (CSV) --------------------------------------------------------
    def opens_record(self, line: str) -> bool:
        """A ``rank,<metric>_ms`` CSV header."""
        return bool(TABLE_HEAD_RE.match(line))

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """``<rank>,<value>`` rows."""
        return bool(TABLE_ROW_RE.match(line))

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """One ``straggler_finding`` row event per rank (``step_ms`` = the row's value)."""
        metric = TABLE_HEAD_RE.match(lines[0])["metric"]
        out = []
        pre = prefix_of(lines[0], ctx)
        for i, x in enumerate(lines[1:], 1):
            r = TABLE_ROW_RE.match(x)
            if not r:
                continue
            v = float(r["v"])
            row_ctx = at_line(ctx, i)
            out.append(event("tool", "straggler_finding", row_ctx, x, pre, severity="info", rank=int(r["rank"]),
                             fields={"metric": metric, "value_ms": v, "step_ms": v}))
        return out


class LossParser:
    """Finite loss values (``kind="loss"``). Not in the default table: every training line has
    one, so it is enabled only by ``IngestOptions(with_loss=True)``."""

    name = "loss"
    source = "train"
    prefilter = r"\b(?:\w+_)?loss\b"
    keywords = ("loss",)

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse ``loss 1.92`` / ``loss: 11.49`` / ``'loss': 0.5`` into a ``loss`` event."""
        m = LOSS_RE.search(line)
        if not m:
            return None
        it = ITER_RE.search(line)
        return event("train", "loss", ctx, line, prefix_of(line, ctx), severity="debug",
                     fields={"loss": float(m["val"]), "metric": m["metric"], "step": _step(line),
                             "iter": to_int(it and it["iter"])})


def _step(line: str) -> int | None:
    m = STEP_RE.search(line)
    return int(m["step"]) if m else None
