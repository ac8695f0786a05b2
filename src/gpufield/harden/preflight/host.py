"""Host checks: free disk for checkpoints, /dev/shm size, and Xid lines in the kernel log since boot.

The kernel log is read from ``/dev/kmsg`` (under the context root; every record still in the ring
buffer since boot, read non-blocking) or from ``config.kernel_log`` (saved ``dmesg`` /
``journalctl -k -b`` output). Lines are parsed by the triage wing's kernel parser
(:class:`gpufield.triage.parsers.kernel.KernelParser`), so preflight and triage agree on what an
Xid line is; a ring buffer that wrapped since boot has lost its oldest lines (the result says how
many lines were read).
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from pathlib import Path

from gpufield.harden.preflight._common import GIB, result
from gpufield.harden.preflight.model import CheckResult, PreflightContext

__all__ = ["CheckpointDisk", "DevShm", "KernelXid", "read_kernel_log"]


class CheckpointDisk:
    """The checkpoint directory exists, is writable and has ``min_free_disk_gib`` free."""

    name = "host.disk"
    description = "free disk space and write access in the checkpoint directory"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        cfg = ctx.config
        d = Path(cfg.checkpoint_dir)
        if not d.is_dir():
            what = "is not a directory" if d.exists() else "does not exist"
            return result(self.name, "fail", f"checkpoint directory {d} {what}",
                          values={"path": str(d)}, fix="create it or pass --checkpoint-dir")
        vfs = os.statvfs(d)
        free_gib = vfs.f_bavail * vfs.f_frsize / GIB
        values = {"path": str(d.resolve()), "free_gib": round(free_gib, 3),
                  "total_gib": round(vfs.f_blocks * vfs.f_frsize / GIB, 3), "min_free_gib": cfg.min_free_disk_gib,
                  "free_inodes": vfs.f_favail}
        if not os.access(d, os.W_OK | os.X_OK):
            return result(self.name, "fail", f"checkpoint directory {d} is not writable by uid {os.getuid()}",
                          values=values, fix="fix its permissions or mount")
        if free_gib < cfg.min_free_disk_gib:
            return result(self.name, "fail", f"{free_gib:.1f} GiB free in {d}, need {cfg.min_free_disk_gib:g} GiB",
                          values=values, fix="free space (old checkpoints) or point --checkpoint-dir elsewhere")
        if vfs.f_files and vfs.f_favail == 0:
            return result(self.name, "fail", f"no free inodes in {d}", values=values)
        return result(self.name, "pass", f"{free_gib:.1f} GiB free in {d}", values=values)


class DevShm:
    """/dev/shm is at least ``min_shm_gib`` (NCCL's shared-memory transport and DataLoader workers use it)."""

    name = "host.shm"
    description = "/dev/shm size"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        p = ctx.path("/dev/shm")
        if not p.is_dir():
            return result(self.name, "fail", f"{p} does not exist", values={"path": str(p)},
                          fix="mount a tmpfs at /dev/shm (docker: --ipc=host or --shm-size)")
        vfs = os.statvfs(p)
        size_gib = vfs.f_blocks * vfs.f_frsize / GIB
        free_gib = vfs.f_bavail * vfs.f_frsize / GIB
        values = {"path": str(p), "size_gib": round(size_gib, 3), "free_gib": round(free_gib, 3),
                  "min_gib": ctx.config.min_shm_gib}
        if size_gib < ctx.config.min_shm_gib:
            return result(self.name, "fail", f"/dev/shm is {size_gib * 1024:.0f} MiB, need {ctx.config.min_shm_gib:g} GiB",
                          values=values, fix="docker/podman: --ipc=host or --shm-size=16g; Kubernetes: an "
                          "emptyDir with medium: Memory at /dev/shm")
        if free_gib < ctx.config.min_shm_gib:
            return result(self.name, "warn", f"/dev/shm has {free_gib:.2f} GiB free of {size_gib:.1f} GiB",
                          values=values, fix="remove stale files in /dev/shm (leftover NCCL / torch segments)")
        return result(self.name, "pass", f"/dev/shm is {size_gib:.1f} GiB ({free_gib:.1f} GiB free)", values=values)


def read_kernel_log(path: Path) -> list[str]:
    """Lines of a kernel log file, or every record of ``/dev/kmsg`` currently in the ring buffer.

    Args:
        path: a regular file, or a ``/dev/kmsg``-like character device (read non-blocking until
            ``EAGAIN``; ``EPIPE`` from records overwritten while reading is skipped).

    A regular file is read with :func:`gpufield._files.read_bytes` (``.gz`` gunzipped; a truncated
    one is an error, never "no Xid in 1 line" of compressed bytes); a named pipe is refused when
    no writer appears (:func:`gpufield._files.open_fifo`) instead of reading as empty.

    Returns:
        The lines, decoded as UTF-8 with replacement.

    Raises:
        OSError: the file cannot be opened (missing, permission, a directory).
        InputError: a truncated or corrupt ``.gz``; a named pipe without a writer.
    """
    import stat

    from gpufield._files import read_bytes

    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if not stat.S_ISCHR(mode):  # /dev/kmsg-like devices only are read non-blocking until EAGAIN
        return read_bytes(path).decode("utf-8", "replace").splitlines()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                b = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:
                    continue
                raise
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace").splitlines()


class KernelXid:
    """Xid / fallen-off-the-bus lines since boot: a fatal one fails, others warn."""

    name = "kernel.xid"
    description = "NVIDIA Xid lines in the kernel log since boot (triage's kernel parser)"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the module docstring."""
        import time

        from gpufield.triage.parsers.kernel import KernelParser
        from gpufield.triage.protocols import LineContext

        path = Path(ctx.config.kernel_log) if ctx.config.kernel_log else ctx.path("/dev/kmsg")
        try:
            lines = read_kernel_log(path)
        except OSError as e:
            return result(self.name, "skip", f"cannot read the kernel log {path}: {e.strerror or e}",
                          values={"path": str(path)},
                          fix="run as root (CAP_SYSLOG) or pass --kernel-log FILE with `journalctl -k -b` output")
        parser = KernelParser()
        year = time.gmtime().tm_year
        xids: list[dict] = []
        i = 0
        while i < len(lines):  # the triage ingest loop in small: records (multi-line) first, else one line
            line, n = lines[i], 1
            if "NVRM" not in line:
                i += 1
                continue
            lc = LineContext(file=str(path), line=i + 1, year=year)
            if parser.opens_record(line):
                rec = [line]
                while i + len(rec) < len(lines) and parser.continues_record(rec, lines[i + len(rec)]):
                    rec.append(lines[i + len(rec)])
                evs, n = parser.parse_record(rec, lc), len(rec)
            else:
                evs = [e for e in [parser.parse_line(line, lc)] if e is not None]
            for ev in evs:
                if ev.kind in ("xid", "gpu_fell_off_bus"):
                    xids.append({"line": i + 1, "xid": int(ev.fields.get("xid", 79)), "bdf": ev.gpu_bdf,
                                 "severity": ev.severity, "kind": ev.kind, "mnemonic": ev.fields.get("mnemonic"),
                                 "text": " ".join(x.strip() for x in rec)[:240] if n > 1 else line.strip()[:240]})
            i += n
        counts = Counter(x["xid"] for x in xids)
        values = {"path": str(path), "lines_read": len(lines), "xid_counts": {str(k): v for k, v in sorted(counts.items())},
                  "xids": xids[-10:]}
        if not xids:
            return result(self.name, "pass", f"no Xid in {len(lines)} kernel log lines", values=values)
        fatal = sorted({x["xid"] for x in xids if x["severity"] == "fatal"})
        summary = ", ".join(f"Xid {k} x{v}" for k, v in sorted(counts.items()))
        if fatal:
            return result(self.name, "fail", f"fatal Xid since boot: {summary}", values=values,
                          fix="drain the node; see `gpufield triage` on the kernel log and NVIDIA's Xid catalogue "
                          "for the action (reset, reboot or RMA)")
        return result(self.name, "warn", f"Xid since boot: {summary}", values=values,
                      fix="application-class Xids (13, 31, 43, 45) follow a job's own faults; recheck after reboot")
