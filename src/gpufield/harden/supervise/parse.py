"""Parsing live training output: which rank a line is from, which step it reports, which phase it announces.

A *progress line* is a line that names a step (or iteration) number **and** a training metric
(loss, learning rate, grad norm, throughput, time per step). Requiring the metric keeps banners
("fault none at step 5"), checkpoint paths ("step6-rank0.pt") and config dumps from counting as
progress. Formats understood by the default pattern (each is a test case in
``tests/harden/test_supervise_parse.py``):

- ``step 12 | loss 2.31 | 0.051 s/step`` (FSDP/torchtitan-style loops)
- ``iteration       12/    1000 | consumed samples: ... | lm loss: 2.3E+00 |`` (Megatron-LM)
- ``[Rank 3] step 12, loss=2.31`` / ``Step 12/1000 lr 3e-4``
- ``{'loss': 2.31, 'grad_norm': 1.1, 'learning_rate': 5e-05, 'epoch': 0.12}`` (HF Trainer; the
  ``'step'`` key when present, else every such dict counts as one step)

A progress line may also carry the rank's **own step time** (:data:`STEP_TIME_RES`, first match
wins): ``compute_time 0.31 s`` / ``compute 310 ms``, ``step_time: 0.31``, ``time/step 0.31``,
``0.31 s/step`` / ``0.31 s/it``, ``3.2 it/s`` (inverted), Megatron's ``elapsed time per iteration
(ms): 310.2``. Loops that print the time a rank spent before the step's collective make a compute
straggler visible from the log alone (:meth:`gpufield.harden.supervise.progress.Progress.check_straggler`,
source ``step_time``); a time that includes the collective is equalised by it and names no one.

The rank comes from torchrun's line prefix (``[rank3]:``, which ``gpufield run`` asks torchrun for
through ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``), else from a ``[rank3]`` / ``[Rank 3]`` /
``rank 3:`` tag inside the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: torchrun's per-rank console prefix as ``gpufield run`` configures it (``[rank${rank}]:``)
PREFIX_RE = re.compile(r"^\[rank(\d+)\]:")
#: a rank tag inside a line (the loop's own ``[rank3]`` / ``[Rank 3]`` / ``rank 3:``)
INNER_RANK_RE = re.compile(r"\[\s*rank\s*(\d+)\s*\]|\brank\s+(\d+)\s*:", re.IGNORECASE)

#: default step pattern; the number is group ``step``
DEFAULT_STEP_PATTERN = (
    r"(?:\b(?:global[_ ]?)?step|\biter(?:ation)?)\s*[:=#]?\s*(?P<step>\d+)(?:\s*/\s*\d+)?\b"
    r"|['\"](?:global_)?step['\"]\s*:\s*(?P<dstep>\d+)"
)
#: a training metric on the line (what makes a step mention a progress line)
DEFAULT_METRIC_PATTERN = (
    r"loss|\blr\b|learning[ _]rate|grad[ _]?norm|s/step|it/s|s/it|tokens?/s|samples?/s"
    r"|throughput|elapsed time per iteration|tflops"
)
_NUM = r"(?P<v>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
#: a rank's own step time on a progress line: (regex with group ``v``, seconds per unit, inverted);
#: tried in order, the first that matches gives the line's ``step_time_s``
STEP_TIME_RES: tuple[tuple[re.Pattern, float, bool], ...] = tuple(
    (re.compile(rx, re.IGNORECASE), scale, inv) for rx, scale, inv in (
        (r"\bcompute(?:[_ ]time)?(?:\s*\(ms\))?\s*[:=]?\s*" + _NUM + r"\s*ms\b", 1e-3, False),
        (r"\bcompute(?:[_ ]time)?(?:\s*\(ms\))\s*[:=]?\s*" + _NUM, 1e-3, False),
        (r"\bcompute(?:[_ ]time)?\s*[:=]?\s*" + _NUM + r"\s*s?\b", 1.0, False),
        (r"\b(?:step[_ ]time|time/step)\s*[:=]?\s*" + _NUM + r"\s*ms\b", 1e-3, False),
        (r"\b(?:step[_ ]time|time/step)\s*[:=]?\s*" + _NUM + r"\s*s?\b", 1.0, False),
        (_NUM + r"\s*s/(?:step|it)\b", 1.0, False),
        (_NUM + r"\s*it/s\b", 1.0, True),
        (r"elapsed time per iteration \(ms\)\s*:\s*" + _NUM, 1e-3, False),
    ))
#: a NaN/Inf loss on a progress line (``loss nan``, ``loss=inf``, ``'loss': nan``, ``lm loss: NaN``)
NAN_RE = re.compile(r"loss['\"]?\s*[:=|]?\s*[-+]?(?:nan|inf)\b", re.IGNORECASE)
#: an HF Trainer log dict without a step key: each counts as one step
HF_DICT_RE = re.compile(r"\{\s*['\"](?:loss|train_loss|eval_loss)['\"]\s*:.*['\"]epoch['\"]\s*:")
#: phase announcements: (phase, pattern). A long phase gets ``phase_timeout_s`` instead of the hang timeout.
DEFAULT_PHASES: tuple[tuple[str, str], ...] = (
    ("checkpoint", r"saving (?:model )?checkpoint|save_checkpoint|checkpoint.{0,20}sav(?:e|ing)|writing checkpoint"),
    ("eval", r"running evaluation|\*{3,} running eval|\bevaluating\b|validation (?:loop|start)"),
    ("teardown", r"training (?:is )?(?:done|complete|completed|finished)|finished training|end of training"),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParsedLine:
    """What one output line says.

    Attributes:
        rank: global rank the line is from, or None (launcher lines).
        step: the step number reported, or None; ``-1`` for a progress line without a number
            (an HF Trainer dict without ``'step'``).
        phase: the long phase the line announces (``"checkpoint"``, ``"eval"``), or None.
        nan: a progress line reporting a NaN/Inf loss.
        text: the line without torchrun's rank prefix.
        step_time_s: the rank's own step time the progress line reports, seconds, or None.
    """

    rank: int | None
    step: int | None
    phase: str | None
    text: str
    nan: bool = False
    step_time_s: float | None = None


class LineParser:
    """Compiles the patterns once; :meth:`parse` is called for every output line.

    Args:
        step_pattern: regex with a named group ``step`` (or ``dstep``) for the step number.
        metric_pattern: regex a progress line must also match; ``""`` accepts every step mention.
        phases: ``(name, regex)`` pairs of long-phase announcements.

    Raises:
        ValueError: a pattern does not compile or the step pattern has no ``step`` group.
    """

    def __init__(self, step_pattern: str = DEFAULT_STEP_PATTERN, metric_pattern: str = DEFAULT_METRIC_PATTERN,
                 phases: tuple[tuple[str, str], ...] = DEFAULT_PHASES) -> None:
        self.step_re = re.compile(step_pattern, re.IGNORECASE)
        if "step" not in self.step_re.groupindex:
            raise ValueError(f"step pattern {step_pattern!r} has no named group 'step'")
        self.metric_re = re.compile(metric_pattern, re.IGNORECASE) if metric_pattern else None
        self.phases = [(name, re.compile(rx, re.IGNORECASE)) for name, rx in phases]

    def parse(self, line: str) -> ParsedLine:
        """Parse one line (without its newline).

        Returns:
            The :class:`ParsedLine`; ``step`` is the largest step number of a progress line.
        """
        rank = None
        m = PREFIX_RE.match(line)
        text = line
        if m:
            rank, text = int(m.group(1)), line[m.end():]
        else:
            mi = INNER_RANK_RE.search(line)
            if mi:
                rank = int(mi.group(1) or mi.group(2))
        step = None
        if self.metric_re is None or self.metric_re.search(text):
            for ms in self.step_re.finditer(text):
                g = ms.groupdict()
                val = g.get("step") or g.get("dstep")
                if val is not None:
                    step = int(val)
                    break
            if step is None and HF_DICT_RE.search(text):
                step = -1
        phase = None
        if step is None:
            for name, rx in self.phases:
                if rx.search(text):
                    phase = name
                    break
        nan = step is not None and bool(NAN_RE.search(text))
        return ParsedLine(rank=rank, step=step, phase=phase, text=text, nan=nan,
                          step_time_s=step_time(text) if step is not None else None)


def step_time(text: str) -> float | None:
    """The step time a progress line reports, seconds (``it/s`` inverted), or None (none, or not > 0).

    Args:
        text: the line without torchrun's prefix.
    """
    for rx, scale, inv in STEP_TIME_RES:
        m = rx.search(text)
        if m:
            try:
                v = float(m.group("v"))
            except ValueError:
                continue
            if not v > 0 or v != v or v == float("inf"):
                return None
            return (1.0 / v if inv else v) * scale
    return None
