"""File helpers every wing's readers and writers share: decoding that names the file, safe outputs.

**Reading.** :func:`decode_utf8` turns bytes into text or raises :class:`~gpufield.errors.InputError`
naming the file, the line, the column and the byte offset of the first invalid byte (instead of
Python's bare ``'utf-8' codec can't decode byte 0xff in position 7``). :func:`read_text` reads and
decodes a file with it; :func:`read_bytes` reads a file, gunzipping ``.gz`` ones, and turns a
truncated or corrupt gzip stream into an InputError (a bare ``EOFError`` is what click reports as
"Aborted"/interrupted, exit 130). Neither blocks forever on a named pipe (FIFO): :func:`open_binary`
opens one without blocking and refuses it, naming it, when no writer appears within
:data:`FIFO_WAIT_S` seconds (a pipe with a writer, such as ``<(zcat x.gz)``, is read as usual);
a device (``/dev/zero``: endless) or a socket is refused.

**Writing.** Every output a command names goes through :func:`check_output` *before* the work starts
and is written with :func:`atomic_write` (or :func:`atomic_path`): a unique temporary file in the
target's directory (``.NAME.XXXX.tmp``, mode as a new file would get under the umask), renamed over
the target at the end, so a reader never sees half a file and an interrupted run leaves the old
file intact. ``force`` replaces only a *regular* file: it never replaces a device (``/dev/null``), a
FIFO, a socket, a directory, a symbolic link (a link could point anywhere; name its target), or a
file that is one of the command's own inputs.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpufield.errors import InputError

__all__ = ["FIFO_WAIT_S", "atomic_path", "atomic_write", "check_output", "decode_utf8", "open_binary", "open_fifo",
           "read_bytes", "read_text"]

#: seconds to wait for a writer on a named pipe given as an input before refusing it
FIFO_WAIT_S = 2.0


def decode_utf8(data: bytes, path: str | os.PathLike[str], *, what: str = "UTF-8 text") -> str:
    """Decode ``data`` as UTF-8 (a leading BOM is dropped).

    Args:
        data: the file's bytes.
        path: the file, for the message.
        what: what the file should hold (``"a CSV of onnx,vnnlib,timeout rows"``).

    Returns:
        The text.

    Raises:
        InputError: an invalid byte; the message gives line, column (1-based, in characters) and
            byte offset (0-based) of the first bad byte and the byte's value.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        start = e.start
        line = data.count(b"\n", 0, start) + 1
        bol = data.rfind(b"\n", 0, start) + 1
        col = len(data[bol:start].decode("utf-8", "replace")) + 1
        bad = data[start:e.end].hex(" ")
        raise InputError(f"invalid UTF-8 (byte 0x{bad} at byte offset {start}): expected {what}",
                         path=os.fspath(path), line=line, column=col) from None


class _PrefixedRaw(io.RawIOBase):
    """A raw stream that returns ``prefix`` first, then reads the file descriptor ``fd``."""

    def __init__(self, prefix: bytes, fd: int) -> None:
        self._prefix, self._fd = prefix, fd

    def readable(self) -> bool:  # noqa: D102 - io protocol
        return True

    def readinto(self, b) -> int:  # noqa: D102 - io protocol
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = os.read(self._fd, len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:  # noqa: D102 - io protocol
        if not self.closed:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        super().close()


def open_fifo(path: str | os.PathLike[str], wait_s: float | None = None, *,
              hint: str = "start the writer first") -> io.BufferedReader:
    """Open a named pipe for reading without blocking forever.

    It is read as a stream when a writer has it open (or has left data in it); when none appears
    within ``wait_s`` seconds (default :data:`FIFO_WAIT_S`) it is refused.

    Raises:
        OSError: it cannot be opened.
        InputError: no writer after ``wait_s`` seconds (names the pipe; ``hint`` says what to do).
    """
    p = os.fspath(path)
    wait_s = FIFO_WAIT_S if wait_s is None else wait_s
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                first = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer has it open, nothing written yet: read it as a stream
                first = b""
                break
            if first:  # data waiting (its writer may have gone): stream it
                break
            # EOF: no writer (none yet, or one that left without writing); wait for one a little
            left = deadline - time.monotonic()
            if left <= 0:
                raise InputError(f"named pipe (FIFO) with no writer after {wait_s:g} s; refusing to wait for "
                                 f"one ({hint})", path=p)
            time.sleep(min(left, 0.05))
        os.set_blocking(fd, True)
        return io.BufferedReader(_PrefixedRaw(first, fd))
    except BaseException:
        os.close(fd)
        raise


def open_binary(path: str | os.PathLike[str]) -> io.BufferedIOBase:
    """``open(path, "rb")``, except that a named pipe goes through :func:`open_fifo` (never a hang)
    and a device or socket is refused (``/dev/zero`` would be read until memory runs out).

    Raises:
        OSError: missing, a directory, unreadable (``filename`` set).
        InputError: a named pipe without a writer; a character or block device or a socket.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if stat.S_ISFIFO(mode):
        return open_fifo(path)
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise InputError(f"is {kind}; expected a regular file (save its content to a file first)",
                         path=os.fspath(path))
    return open(path, "rb")


def read_bytes(path: str | os.PathLike[str], *, gz: bool | None = None) -> bytes:
    """The bytes of ``path``; gunzipped when ``gz`` (default: when the name ends in ``.gz``).

    Raises:
        OSError: the file is missing, a directory or unreadable (``filename`` set: the CLI prints
            ``path: reason``).
        InputError: a named pipe without a writer (:func:`open_fifo`); the gzip stream is truncated or corrupt (names the file and how many bytes
            decoded before the cut).
    """
    p = os.fspath(path)
    gz = p.endswith(".gz") if gz is None else gz
    with open_binary(p) as fh:  # OSError (missing, a directory, permission) names the file itself
        raw = fh.read()
    if not gz:
        return raw
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(raw)
        while d.eof and d.unused_data.strip(b"\x00"):  # concatenated members (cat a.gz b.gz)
            rest = d.unused_data
            d = zlib.decompressobj(wbits=31)
            out += d.decompress(rest)
    except zlib.error as e:
        raise InputError(f"not a valid gzip file ({e})", path=p) from None
    if not d.eof:
        raise InputError(f"truncated gzip file: the stream ends after {len(out)} decompressed bytes, before its "
                         "end-of-stream marker (re-download or re-compress it)", path=p)
    return out


def read_text(path: str | os.PathLike[str], *, what: str = "UTF-8 text", gz: bool | None = False) -> str:
    """Read and decode a UTF-8 text file (see :func:`read_bytes`, :func:`decode_utf8`).

    Raises:
        OSError: unreadable.
        InputError: truncated gzip, or invalid UTF-8 (line, column, byte offset).
    """
    return decode_utf8(read_bytes(path, gz=gz), path, what=what)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | os.PathLike[str], *, force: bool = False,
                 inputs: Iterable[str | os.PathLike[str]] = (), option: str | None = None,
                 append: bool = False, force_flag: str | None = "--force") -> Path:
    """Refuse an output path before any work is done.

    Args:
        path: the file the user named (``--html``, ``--out``, ``--db``).
        force: the user allows replacing (or, with ``append``, adding to) an existing regular file.
        inputs: the command's own input files; the output may not be one of them (compared by
            device and inode, so another name or a hard link of an input is refused too).
        option: the option name, for the message (``"--html"``).
        append: the output is added to rather than replaced (a store); only changes the message.
        force_flag: the command's flag that allows replacing, for the message; None: the command has
            none (the file is never replaced: the message says to choose another name).

    Returns:
        ``Path(path)``.

    Raises:
        InputError: the path is a directory, device, FIFO, socket or symbolic link (with or without
            ``force``), is one of ``inputs``, exists and ``force`` is False, or its directory is
            missing or not writable.
    """
    p = Path(path)
    name = f"{option} " if option else ""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError(f"{name}cannot be checked: {e.strerror or e}", path=str(p)) from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{name}is a symbolic link; refusing to write through it (name its target instead)",
                             path=str(p))
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{name}is a directory, expected a file name", path=str(p))
        if not stat.S_ISREG(st.st_mode):
            kind = ("a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
                    else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a socket"
                    if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise InputError(f"{name}is {kind}; refusing to replace it, even with --force", path=str(p))
        for i in inputs:
            if _same_file(str(p), os.fspath(i)):
                raise InputError(f"{name}is one of the command's inputs; refusing to write over it", path=str(p))
        if not force:
            how = "add to it" if append else "replace it"
            hint = f"pass {force_flag} to {how}" if force_flag else "it is never replaced: move it or name another file"
            raise InputError(f"{name}file exists; refusing to overwrite it ({hint})", path=str(p))
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{name}directory does not exist", path=str(parent))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{name}directory is not writable", path=str(parent))
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, force: bool = False,
                inputs: Iterable[str | os.PathLike[str]] = (), option: str | None = None) -> Iterator[Path]:
    """Yield a unique temporary path beside ``path``; on success rename it over ``path``.

    The temporary file exists (empty, mode from the umask) when the block starts; write to it by
    name (a library that opens the path itself). On an exception it is removed and ``path`` is left
    as it was. The checks of :func:`check_output` run again just before the rename (a file that
    appeared meanwhile is not replaced without ``force``; a special file never).

    Raises:
        InputError: see :func:`check_output`.
    """
    out = check_output(path, force=force, inputs=inputs, option=option)
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".", prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; give what a new file gets
        yield Path(tmp)
        check_output(out, force=force, inputs=inputs, option=option)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, force: bool = False,
                 inputs: Iterable[str | os.PathLike[str]] = (), option: str | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file and a rename.

    Returns:
        ``Path(path)``.

    Raises:
        InputError: see :func:`check_output`.
    """
    with atomic_path(path, force=force, inputs=inputs, option=option) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
    return Path(path)

