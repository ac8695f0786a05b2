"""Lines that *quote* a message instead of reporting one: echoed commands, argument dumps, help and banners.

A shell trace (``+ torchrun ... --stop-if "loss is nan"``), a prompt with the command typed after it,
``export NCCL_IB_GID_INDEX=3``, an ``argparse.Namespace(...)`` dump, a ``--flag   help text`` line or
DeepSpeed's ``key ........ value`` config print contains words that parsers recognise (``loss is nan``,
``status=12``) but reports nothing that happened. The engine drops such events before any rule runs
(issue 23: "a word in a banner or an echoed command line fires a rule"); they are counted in a warning.
All patterns are RE2-compatible.
"""

from __future__ import annotations

import re

_LEAD = re.compile(r"^(?:\s*\[(?:rank|default|trainer|worker)?\d+\]:)?\s*")
_ECHO = re.compile(
    r"^(?:"
    r"\+{1,4} \S"                                            # bash -x / set -x trace
    r"|(?:\([\w.-]+\) ?)?[\w.-]+@[\w.-]+:[^\s$#]*[$#] \S"    # (env) user@host:path$ command
    r"|[$#] \S"                                              # bare prompt
    r"|(?:export|setenv|set) [A-Za-z_]\w*="                  # environment set-up echoed by a job script
    r"|Namespace\("                                          # argparse dump
    r"|(?:args|arguments|argv|cmd|command|cmdline|launch command)\s*[:=] "
    r"|-{1,2}[A-Za-z][\w-]*(?:[ =][^\s]+)?\s{2,}\S"          # --flag VALUE   help text
    r")")
_DS_CONFIG = re.compile(r"\[config\.py:\d+:print\]|^\s*\w+ \.{4,} ")  # DeepSpeed / Megatron config print


def is_echo(raw: str) -> bool:
    """True when ``raw`` quotes text (command echo, argument dump, help, config banner) rather than reporting."""
    first = raw.split("\n", 1)[0]
    body = first[_LEAD.match(first).end():]
    return bool(_ECHO.match(body) or _DS_CONFIG.search(first))
