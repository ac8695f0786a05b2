"""What ``analyze`` reads: checked input paths, standard input, named pipes.

Rules (the CLI and :func:`gpufield.triage.analyze` follow them):

* **A list of paths, never a bare string.** ``analyze("kern.log")`` would otherwise iterate the
  characters of the string as paths (``"/"`` walks the whole file system); a ``str`` or ``bytes``
  raises ``TypeError``. A single ``os.PathLike`` (``pathlib.Path``) is accepted as one path.
* **``-`` is standard input**, read as a stream (through a duplicate of its file descriptor, never by
  reopening it). Its events are labelled ``<stdin>``. ``gpufield triage`` with no path reads standard
  input whenever it is not a terminal (a pipe, FIFO, socket, regular file, or a character device
  such as ``/dev/null``: ``gpufield triage </dev/null`` reads nothing and says there was no input,
  exit 2); only when standard input is a terminal (or closed) does it triage the bundled example
  incident.
* **A missing path among several is an error** (exit 2 in the CLI, every missing path named) unless
  ``allow_missing=True`` (``--allow-missing``), which turns it into a warning as long as one path
  exists.
* **A named pipe (FIFO) never blocks forever.** A FIFO given as a path is opened without blocking
  and read as a stream when a writer has it open (or has left data in it); when no writer appears
  within :data:`FIFO_WAIT_S` seconds it is refused with an error naming it. FIFOs met in a directory
  walk are skipped (ingestion's rule).
* **Folders per host**: see :func:`gpufield.triage.analyze.folder_host` (``job/<host>/dmesg.txt``: the
  folder names the host of files whose lines name none).
* **Compression**: gzip, bzip2 and xz by magic bytes, also on standard input and FIFOs (zstd is
  refused with a message: decompress it first).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufield import _files
from gpufield._files import open_fifo
from gpufield.errors import InputError

__all__ = ["FIFO_WAIT_S", "STDIN", "STDIN_LABEL", "InputSet", "open_input", "resolve_inputs", "stdin_has_input"]

#: the path that means standard input
STDIN = "-"
#: the ``file`` of events read from standard input
STDIN_LABEL = "<stdin>"
#: seconds to wait for a writer on a named pipe given as a path before refusing it
FIFO_WAIT_S = _files.FIFO_WAIT_S
_FD_PREFIXES = ("/dev/fd/", "/proc/self/fd/")


@dataclass(slots=True)
class InputSet:
    """Checked inputs of one analysis.

    Attributes:
        paths: what ingestion reads, in order (standard input as ``/dev/fd/N``).
        given: the paths as the caller gave them (``-`` for standard input).
        labels: ingestion path -> the ``file`` its events get (only where they differ).
        missing: paths that do not exist (kept only with ``allow_missing``).
    """

    paths: list[str]
    given: list[str]
    labels: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno()
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):  # closed, or captured (pytest)
        return None


def stdin_has_input() -> bool:
    """True when standard input is to be read: it is open and not a terminal (a pipe, FIFO, socket,
    regular file or a character device such as ``/dev/null``, which reads as empty input); False
    for a terminal or no usable standard input (closed, or replaced by an object without a file
    descriptor, as test runners do)."""
    fd = _stdin_fd()
    if fd is None:
        return False
    try:
        if os.isatty(fd):
            return False
        os.fstat(fd)
    except OSError:  # fd 0 closed under the Python object
        return False
    return True


def resolve_inputs(paths: object, *, allow_missing: bool = False) -> InputSet:
    """Check the inputs of one analysis (see the module docstring for the rules).

    Args:
        paths: a sequence of paths (``str`` / ``os.PathLike``; ``-`` = standard input), or one
            ``os.PathLike``.
        allow_missing: a missing path among existing ones is a warning, not an error.

    Returns:
        The :class:`InputSet`.

    Raises:
        TypeError: ``paths`` is a ``str`` or ``bytes`` (or not iterable).
        InputError: a path is missing (without ``allow_missing``), every path is missing, ``-``
            appears twice, or ``-`` is given but standard input is closed.
    """
    if isinstance(paths, (str, bytes)):
        raise TypeError(f"expected a list of paths, got the {type(paths).__name__} {paths!r}: pass "
                        f"[{paths!r}] (a string would be read character by character as paths)")
    if isinstance(paths, os.PathLike):
        paths = [paths]
    try:
        given = [os.fspath(p) for p in paths]  # type: ignore[attr-defined]
    except TypeError as e:
        raise TypeError(f"expected a list of paths (str or os.PathLike), got {paths!r}: {e}") from None
    if any(isinstance(p, bytes) for p in given):
        raise TypeError("paths must be str or os.PathLike[str], not bytes")
    out = InputSet(paths=[], given=list(given))
    if given.count(STDIN) > 1:
        raise InputError("standard input ('-') given more than once")
    for p in given:
        if p == STDIN:
            fd = _stdin_fd()
            if fd is None:
                raise InputError("'-' means standard input, but standard input is closed", path=STDIN)
            path = f"/dev/fd/{fd}"
            out.paths.append(path)
            out.labels[path] = STDIN_LABEL
        elif os.path.exists(p) or os.path.islink(p):
            out.paths.append(p)
        else:
            out.missing.append(p)
    if out.missing and (not allow_missing or not out.paths):
        more = f" (and {', '.join(out.missing[1:])})" if len(out.missing) > 1 else ""
        hint = "" if not out.paths else "; pass --allow-missing to analyse the others anyway"
        raise InputError(f"no such file or directory{more}{hint}", path=out.missing[0])
    return out


def _open_fifo(path: str, wait_s: float) -> io.BufferedReader:
    return open_fifo(path, wait_s, hint="start the writer first, or pipe it in: 'cat FIFO | gpufield triage -'")


def open_input(path: str) -> io.BufferedReader:
    """Open one input file for ingestion (binary, with ``peek``), never blocking forever.

    ``/dev/fd/N`` (standard input, ``<(zcat x.gz)``) is read through a duplicate of descriptor ``N``
    (reopening a pipe whose writer has left could block); a named pipe is opened as described in
    the module docstring; anything else with ``open(path, "rb")``.

    Raises:
        OSError: the file cannot be opened.
        InputError: a named pipe without a writer (after :data:`FIFO_WAIT_S` seconds).
    """
    if path.startswith(_FD_PREFIXES):
        tail = path.rsplit("/", 1)[1]
        if tail.isdigit():
            try:
                return os.fdopen(os.dup(int(tail)), "rb")
            except OSError as e:
                if e.errno != errno.EBADF:
                    raise
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False
    if is_fifo:
        return _open_fifo(path, FIFO_WAIT_S)
    return open(path, "rb")


def relabel(events: Sequence, labels: dict[str, str]) -> list:
    """Events whose ``file`` is a key of ``labels`` get the label instead (``/dev/fd/0`` -> ``<stdin>``)."""
    if not labels:
        return list(events)
    from dataclasses import replace

    return [replace(e, file=labels[e.file]) if e.file in labels else e for e in events]
