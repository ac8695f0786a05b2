"""Kernel log parser: NVRM Xid, fallen-off-the-bus, reset required, NVSwitch SXid, PCIe AER,
OOM killer, ConnectX link state (dmesg, ``dmesg -T``, journal, syslog, ``/dev/kmsg``).

Formats: ``../shared/reference/triage.md`` §2.2; Xid template from NVIDIA open-gpu-kernel-modules
(``nvErrorLog_va``, ``_gpuGenerateErrorLog``), SXid from ``NVSWITCH_PRINT_SXID`` in
``src/common/nvswitch/kernel/inc/common_nvswitch.h``; AER from Linux ``drivers/pci/pcie/aer.c``
(``aer_print_error``); OOM from ``mm/oom_kill.c`` (``__oom_kill_process``, ``dump_header``).
Docs: https://docs.nvidia.com/deploy/xid-errors/ , https://docs.kernel.org/PCI/pcieaer-howto.html
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of, to_int
from gpufield.triage.protocols import LineContext

_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
# any bus id in a message: "NVRM: GPU 0000:01:00.0: RmInitAdapter failed!"
ANY_BDF_RE = rx.compile(r"\b(?:PCI:)?(" + _BDF + r")\b")

# NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
# NVRM: Xid (PCI:0000:03:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
# NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
# NVRM: Xid (0000:01:00): 3, C 00000005 ...        (legacy, no "PCI:")
XID_RE = rx.compile(
    r"NVRM: Xid \((?:PCI:)?(?:(?P<bdf>" + _BDF + r")|\.\.\.)(?: GPU-I:(?P<gi>\d+))?\): (?P<xid>\d+)"
    r"(?:, pid=(?P<pid>'?<unknown>'?|\d+|[^,]*))?(?:, name=(?P<name>[^,]*))?,? ?(?P<msg>.*)$")
# ... Contained: CE User Channel (0x9). RST: No, D-RST: No
RST_RE = rx.compile(r"\bRST: (?P<rst>Yes|No), D-RST: (?P<drst>Yes|No)")
# NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 ...)
# NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)
NVLINK5_RE = rx.compile(r"^(?P<sub>\w+) (?P<fatal>Fatal|Nonfatal) \w+ \w+ Link (?P<link>-?\d+) \((?P<intr>0x[0-9a-fA-F]+) (?P<status>0x[0-9a-fA-F]+)")
# ... in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1 / physAddr: 0x1234
PHYS_RE = rx.compile(r"physAddr:? (?P<addr>0x[0-9a-fA-F]+)")
# NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.
FELL_RE = rx.compile(r"NVRM: GPU (?P<bdf>" + _BDF + r"): GPU has fallen off the bus")
# [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
#                NVRM: (PCI ID: 10de:26b5) installed in this system has
#                NVRM: fallen off the bus and is not responding to commands.
FELL_OPEN_RE = rx.compile(r"NVRM: The NVIDIA GPU (?P<bdf>" + _BDF + r")")
PCI_ID_RE = rx.compile(r"PCI ID: (?P<pciid>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})")
# NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874
RESET_RE = rx.compile(r"NV_ERR_RESET_REQUIRED|GPU (?:requires|needs) (?:a )?reset|[Rr]eset required")
# NVRM: GPU at PCI:0000:00:08.0: GPU-<uuid>
GPU_MAP_RE = rx.compile(r"NVRM: GPU at PCI:(?P<bdf>" + _BDF + r"): (?P<uuid>GPU-[\w<>-]+)")
# nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error
SXID_RE = rx.compile(
    r"(?P<sw>nvidia-nvswitch\d+): SXid \(PCI:(?P<bdf>" + _BDF + r")\): (?P<sxid>\d+), "
    r"(?:(?P<sev>Fatal|Non-fatal|Nonfatal), )?(?:Link (?P<link>\d+) )?(?P<msg>.*)$")
# NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: ... status=0x00000062
STATUS_RE = rx.compile(r"status=(?P<status>0x[0-9a-fA-F]+)|\((?P<status2>0x[0-9a-fA-F]{8})\)")
# NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build ...
DRIVER_RE = rx.compile(r"NVRM: loading NVIDIA .*?Kernel Module.*?\s(?P<ver>\d{3}\.\d+(?:\.\d+)?)\s")
NVRM_RE = rx.compile(r"NVRM: (?P<msg>.*)$")
NVRM_BAD_RE = rx.compile(r"(?i)fail|error|timeout|assert|fault|not responding|unable|cannot|exception")
# pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0
# pcieport 0000:00:01.1: AER: Corrected error message received from 0000:01:00.0
# pcieport 0000:00:1c.0: AER: Multiple Uncorrected (Non-Fatal) error received: 0000:03:00.0
AER_RECV_RE = rx.compile(
    r"(?P<agent>[\w-]+) (?P<dev>" + _BDF + r"): AER: (?:Multiple )?(?P<sev>Corrected|Uncorrected \((?:Non-)?Fatal\)|Uncorrectable \((?:Non-)?Fatal\)|Fatal|Non-Fatal)"
    r" error (?:message )?received(?::| from) (?P<src>" + _BDF + r")")
# pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)
# nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)
AER_BUS_RE = rx.compile(
    r"(?P<agent>[\w-]+) (?P<dev>" + _BDF + r"): (?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+)(?:, \((?P<who>[^)]+)\))?")
# nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)
#   (drivers/pci/pcie/err.c report_error_detected, run by pcie_do_recovery for *uncorrectable* errors only, once per
#   device below the failing port; dev_printk names the bound driver, so "nvidia <bdf>" is the GPU behind that port)
AER_NORECOVER_RE = rx.compile(r"(?P<agent>[\w-]+) (?P<dev>" + _BDF + r"): AER: [Cc]an't recover \((?P<why>[^)]*)\)")
# pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00001000/00002000
AER_DEV_RE = rx.compile(r"device \[(?P<vd>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\] error status/mask=(?P<status>[0-9a-fA-F]+)/(?P<mask>[0-9a-fA-F]+)")
# pcieport 0000:00:03.0:    [12] Timeout           /   [ 6] BadTLP   (First)
AER_BIT_RE = rx.compile(r":\s+\[\s*(?P<bit>\d+)\] (?P<name>[A-Za-z][\w ]*?)\s*(?:\(First\))?\s*$")
AER_MORE_RE = rx.compile(r": +(?:device \[|\[\s*\d+\] |TLP Header|AER:\s+Error of this Agent)")
# Out of memory: Killed process 36071 (python) total-vm:123kB, anon-rss:456kB, file-rss:0kB, ...
# Memory cgroup out of memory: Killed process 2190 (python3) total-vm:..kB, anon-rss:..kB
OOM_RE = rx.compile(
    r"(?P<cg>Memory cgroup )?[Oo]ut of memory(?: \(oom_kill_allocating_task\))?: Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
    r"(?: total-vm:(?P<vm>\d+)kB, anon-rss:(?P<anon>\d+)kB)?")
# Kernels before 4.19 print the OOM kill as two lines (mm/oom_kill.c oom_kill_process / __oom_kill_process):
# the chosen task, "%s: Kill process %d (%s) score %u or sacrifice child" (2.6.37-4.18; 2.6.36 "with score",
# 2.6.25-2.6.35 "kill process ... score %li or a child"; %s = "Out of memory", "Out of memory
# (oom_kill_allocating_task)", "Memory cgroup out of memory"), then the victim (the chosen task or one of its
# children), "Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB[, shmem-rss:%lukB]"
# (2.6.3x: "vsz:" for "total-vm:"; RHEL 6/7 kernels add ", UID %d," after the pid or after the name)
#   Out of memory: Kill process 21518 (python2) score 752 or sacrifice child
#   Killed process 21518 (python2) total-vm:13345928kB, anon-rss:12721928kB, file-rss:4kB
#   Killed process 11726, UID 498, (mysqld) total-vm:7823732kB, anon-rss:2539268kB, file-rss:768kB
OOM_SELECT_RE = rx.compile(
    r"(?P<cg>Memory cgroup )?[Oo]ut of [Mm]emory(?: \(oom_kill_allocating_task\))?: [Kk]ill process (?P<pid>\d+) "
    r"\((?P<name>[^)]*)\) (?:with )?score (?P<score>-?\d+)")
OOM_VICTIM_RE = rx.compile(
    r"Killed process (?P<pid>\d+)(?:, UID \d+,)? \((?P<name>[^)]*)\),?(?: UID \d+,)? (?:total-vm|vsz):(?P<vm>\d+)kB, "
    r"anon-rss:(?P<anon>\d+)kB")
# The OOM report's header (mm/oom_kill.c dump_header: "%s invoked oom-killer: gfp_mask=%#x(%pGg), order=%d,
# oom_score_adj=%hd", current->comm, TASK_COMM_LEN 16): printed only when the OOM killer runs, before it picks
# and kills a victim, so it establishes an OOM kill on this host even when the excerpt stops before the
# "Killed process" line. The comm is the task whose allocation failed (not necessarily the victim).
#   python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
#   GC Thread#9 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0
OOM_HEADER_RE = rx.compile(r"(?P<name>[^\s\]:][^\]:]{0,14}?) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+)")
# the kernel's memory report (mm/show_mem.c __show_mem / show_swap_cache_info: "Free swap  = %lukB"), printed
# by the OOM killer's dump_header and by page-allocation-failure warnings (warn_alloc): a report with no free
# swap left is host memory exhaustion caught in the act, even when the excerpt keeps only this line
#   Mar 10 01:33:03 cpu-6-2 kernel: Free swap  = 0kB
SWAP_RE = rx.compile(r"\bFree swap\s+=\s+(?P<kb>\d+)kB")
# mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN
MLX_RE = rx.compile(r"mlx5_core (?P<bdf>" + _BDF + r")(?: (?P<hca>\w+))?: Port: (?P<port>\d+) Link (?P<state>[A-Z_]+)")

#: Xids this parser treats specially: 79 is the code given to fallen-off-the-bus records without
#: an Xid; 63/92 are logged as warnings (recording / trend events); 144-150 carry the NVLink5
#: subcode decode. The catalogue test checks each exists in gpufield.triage.catalog.
FELL_OFF_BUS_XID = 79
SPECIAL_XIDS = (63, FELL_OFF_BUS_XID, 92, 144, 145, 146, 147, 148, 149, 150)
_WARNING_XIDS = (63, 92)


def _aer_severity(text: str) -> str:
    t = text.lower()
    if "corrected" in t and "uncorrect" not in t:
        return "warning"
    return "error" if "non-fatal" in t else "fatal"


class KernelParser:
    """Kernel-log records about GPUs, NVSwitches, PCIe, NICs and the OOM killer."""

    name = "kernel"
    source = "kernel"
    prefilter = (r"NVRM|SXid|AER: |PCIe Bus Error|Killed process|[Oo]ut of [Mm]emory[^:]*: [Kk]ill process|"
                 r"invoked oom-killer: |Free swap +=|"
                 r"mlx5_core \S+ \S+ Port: \d+ Link")
    keywords = ("NVRM", "SXid", "AER: ", "PCIe Bus Error", "Killed process", "Kill process", "kill process", "mlx5_core",
                "invoked oom-killer: ", "Free swap ")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one kernel-log line (see module docstring for the formats)."""
        if "NVRM" in line:
            return self._nvrm(line, ctx)
        m = SXID_RE.search(line)
        if m:
            sev = m["sev"]
            return event("kernel", "sxid", ctx, line, prefix_of(line, ctx), code=int(m["sxid"]),
                         severity="fatal" if sev == "Fatal" else "error", bdf=m["bdf"],
                         fields={"sxid": int(m["sxid"]), "message": m["msg"].strip(),
                                 "fatal": None if sev is None else sev == "Fatal",
                                 "link": to_int(m["link"]), "switch": m["sw"]})
        m = AER_BUS_RE.search(line) or AER_RECV_RE.search(line)
        if m:
            return self.parse_record([line], ctx)[0]
        m = AER_NORECOVER_RE.search(line) if "recover (" in line else None
        if m:
            return event("kernel", "pcie_aer", ctx, line, prefix_of(line, ctx), severity="error", bdf=m["dev"],
                         fields={"agent": m["agent"], "device": m["dev"], "recovery": m["why"],
                                 "severity_text": "Uncorrected (recovery failed)"})
        m = OOM_RE.search(line) or OOM_VICTIM_RE.search(line) or OOM_SELECT_RE.search(line)
        if m:
            g = m.groupdict()
            return event("kernel", "host_oom_kill", ctx, line, prefix_of(line, ctx), severity="fatal",
                         code=None, fields={"pid": int(m["pid"]), "name": m["name"],
                                            "anon_rss_kb": to_int(g.get("anon")), "total_vm_kb": to_int(g.get("vm")),
                                            "cgroup": bool(m["cg"]) if "cg" in g else None,
                                            "score": to_int(g.get("score"))})
        m = OOM_HEADER_RE.search(line) if "invoked oom-killer: " in line else None
        if m:  # the report's header: the OOM killer ran on this host (the victim line may be cut off)
            return event("kernel", "host_oom_kill", ctx, line, prefix_of(line, ctx), severity="fatal", code=None,
                         fields={"pid": None, "name": None, "trigger": m["name"].strip(), "gfp_mask": m["gfp"],
                                 "report_header": True})
        m = SWAP_RE.search(line) if "Free swap " in line else None
        if m:
            kb = int(m["kb"])
            return event("kernel", "mem_report", ctx, line, prefix_of(line, ctx), code=None,
                         severity="warning" if kb == 0 else "info", fields={"free_swap_kb": kb})
        m = MLX_RE.search(line)
        if m:
            down = m["state"] == "DOWN"
            return event("kernel", "nic_link_state", ctx, line, prefix_of(line, ctx), code=m["state"],
                         severity="warning" if down else "info",
                         fields={"hca": m["hca"], "port": int(m["port"]), "state": m["state"],
                                 "nic_bdf": m["bdf"]})
        return None

    def _nvrm(self, line: str, ctx: LineContext) -> Event | None:
        pre = prefix_of(line, ctx)
        m = XID_RE.search(line)
        if m:
            return _xid_event(m, line, ctx, pre)
        m = FELL_RE.search(line)
        if m:
            return event("kernel", "gpu_fell_off_bus", ctx, line, pre, code=str(FELL_OFF_BUS_XID), severity="fatal",
                         bdf=m["bdf"], fields={"message": line[m.start():]})
        if FELL_OPEN_RE.search(line) and "fallen off the bus" in line:
            return self.parse_record([line], ctx)[0]
        if RESET_RE.search(line):
            s = STATUS_RE.search(line)
            return event("kernel", "gpu_reset_required", ctx, line, pre, severity="fatal",
                         code="NV_ERR_RESET_REQUIRED", bdf=_any_bdf(line),
                         fields={"message": _after(line, "NVRM: "),
                                 "status": s and (s["status"] or s["status2"])})
        m = GPU_MAP_RE.search(line)
        if m:
            return event("kernel", "gpu_map", ctx, line, pre, severity="info", bdf=m["bdf"],
                         uuid=m["uuid"])
        m = NVRM_RE.search(line)
        if m:
            msg = m["msg"].strip()
            d = DRIVER_RE.search(line)
            s = STATUS_RE.search(line)
            bad = bool(NVRM_BAD_RE.search(msg))
            return event("kernel", "nvrm_other", ctx, line, pre, severity="error" if bad else "info",
                         bdf=_any_bdf(msg),
                         fields={"message": msg, "status": s and (s["status"] or s["status2"]),
                                 "driver_version": d and d["ver"]})
        return None

    # --- multi-line records: fallen off the bus, PCIe AER -----------------------------------
    def opens_record(self, line: str) -> bool:
        """Fallen-off-the-bus first line without its end, or an AER report's first line."""
        if "NVRM: The NVIDIA GPU" in line:
            return "not responding" not in line
        return bool(AER_RECV_RE.search(line) or AER_BUS_RE.search(line))

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """Indented NVRM continuation lines / same-device AER detail lines."""
        first = lines[0]
        if "NVRM: The NVIDIA GPU" in first:
            return ("NVRM:" in line and "not responding" not in "".join(lines)
                    and "NVRM: Xid" not in line and not FELL_OPEN_RE.search(line) and len(lines) < 4)
        m = AER_RECV_RE.search(first) or AER_BUS_RE.search(first)
        dev = m["dev"] if m else None
        if not dev or dev not in line or AER_RECV_RE.search(line):
            return False
        if AER_BUS_RE.search(line):
            return not any(AER_BUS_RE.search(x) for x in lines)
        return bool(AER_MORE_RE.search(line))

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """One ``gpu_fell_off_bus`` or ``pcie_aer`` event for the whole record."""
        raw = "\n".join(lines)
        pre = prefix_of(lines[0], ctx)
        m = FELL_OPEN_RE.search(lines[0])
        if m:
            text = " ".join(_after(x, "NVRM: ") for x in lines)
            if "fallen off the bus" not in text:
                return [event("kernel", "nvrm_other", ctx, raw, pre, bdf=m["bdf"],
                              fields={"message": text, "truncated": True})]
            p = PCI_ID_RE.search(text)
            return [event("kernel", "gpu_fell_off_bus", ctx, raw, pre, code=str(FELL_OFF_BUS_XID), severity="fatal",
                          bdf=m["bdf"], fields={"message": text, "pci_id": p and p["pciid"],
                                                "multiline": len(lines) > 1})]
        f: dict = {"errors": []}
        sev_text = None
        for x in lines:
            r = AER_RECV_RE.search(x)
            if r:
                sev_text = sev_text or r["sev"]
                f["source"] = r["src"]
                f["agent"] = r["agent"]
                f["device"] = f.get("device") or r["dev"]
            b = AER_BUS_RE.search(x)
            if b:
                sev_text = b["sev"].strip()
                f.update(type=b["type"].strip(), agent=b["agent"], device=b["dev"], id_kind=b["who"])
            d = AER_DEV_RE.search(x)
            if d:
                f.update(vendor_device=d["vd"], status=d["status"], mask=d["mask"])
            e = AER_BIT_RE.search(x)
            if e and not d:
                f["errors"].append(f"[{int(e['bit'])}] {e['name'].strip()}")
        f["severity_text"] = sev_text
        dev = f.get("source") or f.get("device")
        if f.get("id_kind") is None:
            f.pop("id_kind", None)
        return [event("kernel", "pcie_aer", ctx, raw, pre, code=f.get("type"),
                      severity=_aer_severity(sev_text or ""), bdf=f.get("device") or dev, fields=f)]


def _xid_event(m: rx.Match, line: str, ctx: LineContext, pre) -> Event:
    from gpufield.triage.catalog import xid_info

    xid = int(m["xid"])
    msg = (m["msg"] or "").strip()
    info = xid_info(xid)
    f: dict = {"xid": xid, "pid": to_int(m["pid"]), "name": _clean(m["name"]), "message": msg,
               "mnemonic": info.mnemonic if info.known else None,
               "gpu_instance": to_int(m["gi"])}
    r = RST_RE.search(msg)
    if r:
        f["rst"], f["d_rst"] = r["rst"] == "Yes", r["drst"] == "Yes"
    n = NVLINK5_RE.search(msg)
    if n:
        f.update(subcode=n["sub"], fatal=n["fatal"] == "Fatal", link=int(n["link"]),
                 intrinfo=n["intr"], error_status=n["status"])
    a = PHYS_RE.search(msg)
    if a:
        f["phys_addr"] = a["addr"]
    fatal = f.get("fatal", info.fatal)
    sev = "fatal" if fatal else ("error" if fatal is None or xid not in _WARNING_XIDS else "warning")
    return event("kernel", "xid", ctx, line, pre, code=xid, severity=sev, bdf=m["bdf"],
                 pid=f["pid"], fields=f)


def _clean(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip().strip("'")
    return None if name in ("", "<unknown>") else name


def _after(line: str, marker: str) -> str:
    i = line.find(marker)
    return (line[i + len(marker):] if i >= 0 else line).strip()


def _any_bdf(text: str) -> str | None:
    m = ANY_BDF_RE.search(text)
    return m.group(1) if m else None
