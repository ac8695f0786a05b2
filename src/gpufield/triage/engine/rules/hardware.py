"""Hardware rules (tier 0): Xid, fallen off the bus, GSP, ECC/HBM, NVLink, reset required, PCIe.

Xid meanings and buckets follow triage.md section 2.1 (NVIDIA Xid catalog via NVSentinel's CSV);
the mapping from Xid code to *triage class* is rule logic and lives here, while mnemonics, buckets
and the fatal flag are read from ``gpufield.triage.catalog`` when it is installed.
"""

from __future__ import annotations

import re

from gpufield.triage.engine.model import (
    CONF_DETERMINISTIC,
    CONF_INFERRED,
    CONF_PRIOR,
    Finding,
    Tier,
)
from gpufield.triage.engine.rules.base import (
    RuleContext,
    as_int,
    entity_conf,
    finding,
    gpu_of,
    group_by,
    text,
)
from gpufield.triage.events import Event

XID_FELL_OFF_BUS = frozenset({79})
XID_GSP = frozenset({119, 120})
XID_DBE = frozenset({48, 171})  # double-bit / uncorrectable DRAM error (171 on new drivers)
XID_ECC = frozenset({48, 94, 95, 140, 171, 172})
XID_REMAP = frozenset({63, 64})  # row-remap recorded / remap failure
REMAP_GROWTH = 3  # Xid 63 records at this many distinct times on one GPU = growing remaps (degradation)
XID_NVLINK = frozenset({74, 136, 155} | set(range(144, 151)))
XID_APP = frozenset({13, 31})  # graphics exception / MMU fault: usually the application
XID_SECONDARY = frozenset({8, 43, 45, 92, 154})  # follow-ups, trends, recovery announcements
#: catalog buckets that mean "the GPU needs a reset or a reboot"
RESET_BUCKETS = frozenset({"RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "RESET_FABRIC"})

# "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149" (R570+
# drivers: the channel teardown names the fault that caused it; open-gpu-kernel-modules #1150)
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_GSP_TEXT = re.compile(r"GSP Timeout|RPC from GSP|RPC response from GPU\d* GSP", re.IGNORECASE)
_RESET_TEXT = re.compile(r"NV_ERR_RESET_REQUIRED|Reset required|GPU needs? (?:to be )?reset", re.IGNORECASE)
_ECC_TEXT = re.compile(r"uncorrectable ECC error|cudaErrorECCUncorrectable", re.IGNORECASE)
_NVLINK_TEXT = re.compile(r"uncorrectable NVLink error|cudaErrorNvlinkUncorrectable", re.IGNORECASE)
_GPU_LOST_TEXT = re.compile(
    r"Unable to determine the device handle|GPU is lost|NVML_ERROR_GPU_IS_LOST|GPU has fallen off",
    re.IGNORECASE,
)
# NVML's own verdict for a detached GPU (triage.md 1.11: the NVML twin of Xid 79):
#   "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"
_RM_INIT_FAILED = re.compile(r"RmInitAdapter failed|rm_init_adapter failed")
_GPU_IS_LOST = re.compile(r"GPU is lost|NVML_ERROR_GPU_IS_LOST|GPU_IS_LOST", re.IGNORECASE)


def xid_code(e: Event) -> int | None:
    """The Xid number of an ``xid`` event (``code`` or ``fields['xid']``)."""
    return as_int(e.code if e.code is not None else e.fields.get("xid"))


def _catalog(code: int) -> tuple[str | None, bool | None]:
    """(bucket, fatal) from ``gpufield.triage.catalog`` if available, else (None, None)."""
    try:
        from gpufield.triage.catalog import xid_info
    except ImportError:
        return None, None
    try:
        info = xid_info(code)
    except Exception:  # unknown code: the catalog's own error type
        return None, None
    if info is None or getattr(info, "known", True) is False:
        return None, None
    get = info.get if isinstance(info, dict) else lambda k: getattr(info, k, None)
    return get("bucket"), get("fatal")


def _mnemonic(code: int) -> str:
    try:
        from gpufield.triage.catalog import xid_info

        info = xid_info(code)
    except Exception:  # catalog missing or unknown code
        return ""
    return str(getattr(info, "mnemonic", "") or "") if info is not None and getattr(info, "known", True) else ""


def xid_class(code: int, e: Event | None = None) -> str | None:
    """Triage class of one Xid code, or None when the code is secondary/app-level noise.

    Codes without a specific class fall back on the catalog: a fatal code or a reset bucket gives
    ``GPU_RESET_REQUIRED``; so does ``RST: Yes`` / ``D-RST: Yes`` in the message.
    """
    if code in XID_FELL_OFF_BUS:
        return "GPU_FELL_OFF_BUS"
    if code in XID_GSP:
        return "GSP_TIMEOUT"
    if code in XID_ECC:
        return "ECC_UNCORRECTABLE"
    if code in XID_REMAP:
        return "HBM_DEGRADATION"
    if code in XID_NVLINK:
        return "NVLINK_FAULT"
    if code in XID_APP:
        return "CUDA_ILLEGAL_ADDRESS"
    if code in XID_SECONDARY:
        return None
    if _mnemonic(code).startswith("NVLINK"):  # catalogued NVLink codes outside the listed ranges (137 ...)
        return "NVLINK_FAULT"
    bucket, fatal = _catalog(code)
    flags = (e.fields.get("rst"), e.fields.get("d_rst")) if e is not None else ()
    if fatal is True or (bucket in RESET_BUCKETS) or any(f is True or str(f).lower() == "yes" for f in flags):
        return "GPU_RESET_REQUIRED"
    return None


def _xid_findings(ctx: RuleContext) -> list[Finding]:
    """Xid lines plus the multi-line fallen-off-bus record, grouped per (class, host, GPU)."""
    tagged: list[tuple[str, Event]] = []
    for e in ctx.kinds("xid", "gpu_fell_off_bus", "nvrm_other", "gpu_reset_required", "gpu_handle_error", "cuda_error",
                       "python_exception"):
        if e.kind == "xid":
            code = xid_code(e)
            cls = xid_class(code, e) if code is not None else None
            prev = _CAUSED_BY.search(e.raw)
            if cls is None and prev:  # a follow-up Xid (45 channel teardown) that names its cause
                cls = xid_class(int(prev.group(1)))
            if cls is None or cls == "CUDA_ILLEGAL_ADDRESS":
                continue  # app-level Xids are handled by the process rules
        elif e.kind == "gpu_fell_off_bus":
            cls = "GPU_FELL_OFF_BUS"
        elif _GPU_IS_LOST.search(text(e)):
            cls = "GPU_FELL_OFF_BUS"
        elif e.kind in ("gpu_handle_error", "cuda_error", "python_exception"):
            continue  # only "GPU is lost" (above) is decisive from these
        elif e.kind == "gpu_reset_required" or _RESET_TEXT.search(text(e)):
            cls = "GPU_RESET_REQUIRED"
        elif _GSP_TEXT.search(text(e)):
            cls = "GSP_TIMEOUT"
        else:
            continue
        tagged.append((cls, e))
    # HBM degradation: repeated DBE on one GPU, or a remap event together with a DBE
    per_gpu = group_by([e for c, e in tagged if c in ("ECC_UNCORRECTABLE", "HBM_DEGRADATION")],
                       lambda e: (e.host, gpu_of(e)))
    degraded = set()
    for key, evs in per_gpu.items():
        codes = [xid_code(e) for e in evs if e.kind == "xid"]
        dbe = [c for c in codes if c in XID_DBE]
        remaps = {ctx.t(e) for e in evs if e.kind == "xid" and xid_code(e) == 63}
        if 64 in codes or len(dbe) >= 2 and len({ctx.t(e) for e in evs}) > 1 or dbe and 63 in codes \
                or len(remaps) >= REMAP_GROWTH:
            degraded.add(key)
    out = []
    weak: set[tuple[str, str | None, str | None]] = set()
    groups = group_by(tagged, lambda ce: (ce[0], ce[1].host, gpu_of(ce[1])))
    for (cls, host, gpu), items in groups.items():
        evs = [e for _, e in items]
        if cls in ("ECC_UNCORRECTABLE", "HBM_DEGRADATION"):
            if (host, gpu) in degraded:
                cls = "HBM_DEGRADATION"
            elif cls == "HBM_DEGRADATION" and all(xid_code(e) == 63 for e in evs if e.kind == "xid"):
                weak.add((cls, host, gpu))  # a lone remap record: a trend signal, not yet a failure
        gpu_id = gpu or _gpu_from_text(evs)
        uuid = ctx.timeline.gpu_uuid.get((host, gpu_id)) if gpu_id else None
        maps = [m for m in ctx.kinds("gpu_map") if m.host == host and gpu_id and m.gpu_bdf == gpu_id]
        codes = sorted({str(xid_code(e)) for e in evs if e.kind == "xid"})
        causes = sorted({m.group(1) for e in evs if e.kind == "xid" for m in [_CAUSED_BY.search(e.raw)] if m})
        if causes:  # root the incident at the NVLink/other Xid the follow-ups name, not at the follow-up
            codes = sorted(set(codes) - {str(xid_code(e)) for e in evs if _CAUSED_BY.search(e.raw)} | set(causes))
        facts = {"xid": ",".join(codes)} if codes else {}
        if causes:
            facts["caused_by"] = ",".join(causes)
        bucket = _bucket_of(evs)
        if bucket:
            facts["bucket"] = bucket
        if uuid:
            facts["uuid"] = uuid
        note = _NOTES[cls].format(n=len(evs), gpu=gpu_id or "an unidentified GPU", host=host or "the host",
                                  xid=facts.get("xid", "-"))
        rank = ctx.timeline.gpu_rank.get((host, gpu_id)) if gpu_id else None
        if cls == "NVLINK_FAULT" and all(e.fields.get("fatal") is False for e in evs if e.kind == "xid"):
            weak.add((cls, host, gpu))  # NVLink5 "Nonfatal" subcodes
        is_weak = (cls, host, gpu) in weak
        if is_weak and cls == "HBM_DEGRADATION":
            facts["hint"] = "lone_remap"  # ordered as a hint, action: monitor (engine/actions.py)
        out.append(finding(ctx, cls, "xid_catalog", Tier.HARDWARE,
                           CONF_PRIOR if is_weak else entity_conf(host, gpu_id), evs + maps,
                           established=not is_weak, note=note + (" Non-fatal so far: watch its rate." if is_weak else ""),
                           gpu=gpu_id, rank=rank, facts=facts))
    return _fabric_wide(_merge_same_gpu(out))


def _fabric_wide(found: list[Finding]) -> list[Finding]:
    """NVLink faults on several GPUs of one host are one fault of the node's NVLink fabric (NVSwitch,
    Fabric Manager), not one GPU each: merged into the earliest, with every GPU named
    (open-gpu-kernel-modules#1150: Xid 149/145 then 45 on four GPUs, cleared only by a reboot)."""
    nvl = group_by([f for f in found if f.cls == "NVLINK_FAULT" and f.gpu and f.established], lambda f: f.host)
    out = [f for f in found if not (f.cls == "NVLINK_FAULT" and f.gpu and f.established
                                    and len({g.gpu for g in nvl[f.host]}) > 1)]
    for host, fs in nvl.items():
        gpus = sorted({f.gpu for f in fs})
        if len(gpus) < 2:
            continue
        fs.sort(key=lambda f: (f.root.ts_ns or 0, f.root.file, f.root.line))
        keep = fs[0]
        for f in fs[1:]:
            keep.evidence.extend(e for e in f.evidence if e not in keep.evidence)
        xids = sorted({x for f in fs for x in f.facts.get("xid", "").split(",") if x})
        keep.facts.update({"gpus": ",".join(gpus), "n_gpus": str(len(gpus)), "xid": ",".join(xids)})
        keep.note = (f"NVLink faults (Xid {','.join(xids)}) on {len(gpus)} GPUs of {host or 'the host'} "
                     f"({', '.join(gpus)}): the node's NVLink fabric, not one GPU.")
        out.append(keep)
    return out


def _bucket_of(evs: list[Event]) -> str | None:
    """The catalogue bucket governing a group of Xid lines: a reset/reboot bucket if any line has
    one, else the first line's; ``RST: Yes`` / ``D-RST: Yes`` in a line overrides a no-reset bucket."""
    buckets = []
    for e in evs:
        code = xid_code(e) if e.kind == "xid" else None
        if code is None:
            continue
        bucket, _ = _catalog(code)
        if any(str(e.fields.get(k)).lower() in ("true", "yes") for k in ("rst", "d_rst")) \
                and bucket not in RESET_BUCKETS:
            bucket = "RESET_GPU"  # the driver says this instance needs a reset
        if bucket:
            buckets.append(bucket)
    return next((b for b in buckets if b in RESET_BUCKETS), buckets[0] if buckets else None)


_NOTES = {
    "GPU_FELL_OFF_BUS": "GPU {gpu} on {host} fell off the bus (Xid {xid}); no numeric precursor is expected.",
    "GSP_TIMEOUT": "GSP firmware RPC timeout on GPU {gpu} ({n} record(s)); the GPU stops answering.",
    "ECC_UNCORRECTABLE": "Uncorrectable ECC error (Xid {xid}) on GPU {gpu}.",
    "HBM_DEGRADATION": "Repeated uncorrectable DRAM errors / row-remap events on GPU {gpu}: degrading HBM.",
    "NVLINK_FAULT": "NVLink fault (Xid {xid}) on GPU {gpu}.",
    "GPU_RESET_REQUIRED": "GPU {gpu} on {host} is in a state that needs a reset ({n} record(s)).",
}


def _gpu_from_text(evs: list[Event]) -> str | None:
    for e in evs:
        m = re.search(r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.(\d))?\b", e.raw)
        if m:
            return f"{m.group(1).lower()}.{m.group(2) or '0'}"
    for e in evs:  # "NVRM: GPU0 nvCheckFailedNoLog ...": the driver's own ordinal when no bus id is printed
        m = re.search(r"\bNVRM: GPU(\d+) ", e.raw)
        if m:
            return f"GPU {m.group(1)}"
    return None


def _merge_same_gpu(found: list[Finding]) -> list[Finding]:
    """One GPU, several classes: keep the most specific (fell off bus > GSP > reset required)."""
    order = ["GPU_FELL_OFF_BUS", "HBM_DEGRADATION", "ECC_UNCORRECTABLE", "NVLINK_FAULT", "GSP_TIMEOUT",
             "GPU_RESET_REQUIRED"]
    by_gpu = group_by(found, lambda f: (f.host, f.gpu)) if found else {}
    out = []
    for (_host, gpu), fs in by_gpu.items():
        if gpu is None or len(fs) == 1:
            out.extend(fs)
            continue
        fs.sort(key=lambda f: order.index(f.cls))
        keep = fs[0]
        for f in fs[1:]:
            keep.evidence.extend(e for e in f.evidence if e not in keep.evidence)
        out.append(keep)
    return out


def xid_rule(ctx: RuleContext) -> list[Finding]:
    """Catalogued Xids, fallen-off-bus records, GSP timeouts and reset-required lines."""
    return _xid_findings(ctx)


def dcgm_xid_rule(ctx: RuleContext) -> list[Finding]:
    """dcgm-exporter Xid metrics (``DCGM_FI_DEV_XID_ERRORS`` = last Xid, ``DCGM_EXP_XID_ERRORS_COUNT{xid=}``).

    Telemetry sees Xids even where the container cannot read dmesg (marin #7344); the value has no
    message, so the finding cites the sample and asks for the kernel line.
    """
    tagged = []
    for e in ctx.kinds("metric_sample"):
        metric, labels = e.fields.get("metric"), e.fields.get("labels") or {}
        value = as_int(e.fields.get("value"))
        if metric == "DCGM_FI_DEV_XID_ERRORS" and value:
            code = value
        elif metric == "DCGM_EXP_XID_ERRORS_COUNT" and value and as_int(labels.get("xid")):
            code = as_int(labels.get("xid"))
        else:
            continue
        cls = xid_class(code) if code else None
        if cls is not None:
            tagged.append((cls, code, e))
    out = []
    for (cls, host, gpu), items in group_by(tagged, lambda t: (t[0], t[2].host, gpu_of(t[2]))).items():
        codes = ",".join(sorted({str(c) for _, c, _ in items}))
        out.append(finding(ctx, cls, "dcgm_xid", Tier.HARDWARE, CONF_DETERMINISTIC if cls != "CUDA_ILLEGAL_ADDRESS"
                           else CONF_PRIOR, [e for _, _, e in items], established=cls != "CUDA_ILLEGAL_ADDRESS",
                           facts={"xid": codes},
                           note=f"dcgm-exporter reports Xid {codes} on GPU {gpu or '?'} of {host or 'the host'} "
                                "(telemetry only: look for the NVRM line in that host's kernel log)."))
    return out


def sxid_rule(ctx: RuleContext) -> list[Finding]:
    """NVSwitch SXid errors -> ``NVLINK_FAULT`` (fatal: established; non-fatal: a weak hint)."""
    out = []
    for host, group in group_by(ctx.kinds("sxid"), lambda e: e.host).items():
        fatal = [e for e in group if e.fields.get("fatal") is True or e.severity == "fatal"]
        codes = ",".join(sorted({str(e.code or e.fields.get("sxid")) for e in group}))
        out.append(finding(ctx, "NVLINK_FAULT", "sxid", Tier.HARDWARE, 0.85 if fatal else CONF_PRIOR,
                           fatal or group, established=bool(fatal), gpu=None,
                           facts={"sxid": codes, "switch": _switch_of(fatal or group)},
                           note=f"NVSwitch SXid {codes} on {host or 'the host'}"
                                + (" (fatal): the NVLink fabric of this node failed." if fatal else " (non-fatal).")))
    return out


def _switch_of(evs: list[Event]) -> str:
    """``nvidia-nvswitch0 (PCI 0000:c3:00.0) link 30`` from the first SXid line that names them."""
    e = evs[0]
    parts = [str(e.fields.get("switch") or "the NVSwitch")]
    if e.gpu_bdf:
        parts.append(f"(PCI {e.gpu_bdf})")
    if e.fields.get("link") is not None:
        parts.append(f"link {e.fields['link']}")
    return " ".join(parts)


def cuda_hw_error_rule(ctx: RuleContext) -> list[Finding]:
    """CUDA errors that name a hardware fault: uncorrectable ECC, uncorrectable NVLink."""
    out = []
    for pattern, cls in ((_ECC_TEXT, "ECC_UNCORRECTABLE"), (_NVLINK_TEXT, "NVLINK_FAULT")):
        evs = ctx.matching(pattern, ("cuda_error", "python_exception", "watchdog_blocked", "nccl_error",
                                     "nccl_internal_error"))
        for (host, _), group in group_by(evs, lambda e: (e.host, gpu_of(e))).items():
            # the error is raised in the process of the rank that uses the faulty GPU: when the group's lines name
            # one rank (the traceback has none, the same error re-raised by that rank's NCCL watchdog has
            # "[Rank 1]"), that rank is blamed
            ranks = {e.rank for e in group if e.rank is not None}
            out.append(finding(ctx, cls, "cuda_hw_error", Tier.HARDWARE, entity_conf(host, gpu_of(group[0])),
                               group, rank=group[0].rank if group[0].rank is not None or len(ranks) != 1
                               else ranks.pop(),
                               note=f"CUDA reported an {cls.replace('_', ' ').lower()} in the "
                               "application; the driver's Xid line names the GPU."))
    return out


def smi_memory_rule(ctx: RuleContext) -> list[Finding]:
    """nvidia-smi / NVML memory state: row-remap failure (RMA), a pending remap (reset required), volatile
    uncorrectable ECC counts."""
    out = []
    for e in ctx.kinds("row_remap"):
        fail = str(e.fields.get("failure", "")).lower() in ("yes", "true", "1")
        if fail:
            out.append(finding(ctx, "HBM_DEGRADATION", "smi_memory", Tier.HARDWARE, entity_conf(e.host, gpu_of(e)),
                               [e], note="Row-remap failure reported: the RMA criterion for HBM."))
        elif e.fields.get("pending") is True:
            # NVIDIA A100/H100 GPU memory error management: a remap recorded after an uncorrectable error is
            # "Pending" until the next GPU reset, which activates it (no failure: no RMA yet)
            n = as_int(e.fields.get("uncorrectable"))
            out.append(finding(ctx, "GPU_RESET_REQUIRED", "smi_memory", Tier.HARDWARE,
                               entity_conf(e.host, gpu_of(e)), [e],
                               note="Row remapping pending" + (f" after {n} uncorrectable-error row(s)" if n else "")
                               + ": the GPU needs a reset (or reboot) for the remap to take effect."))
    for e in ctx.kinds("ecc_counter"):
        counter = str(e.fields.get("counter", "")).lower()
        value = as_int(e.fields.get("value")) or 0
        if value > 0 and ("uncorr" in counter or "dbe" in counter or "double" in counter) \
                and e.fields.get("volatile") is not False and "aggregate" not in counter:
            out.append(finding(ctx, "ECC_UNCORRECTABLE", "smi_memory", Tier.HARDWARE, CONF_INFERRED, [e],
                               note=f"Volatile uncorrectable ECC count {value} on {gpu_of(e) or 'a GPU'}."))
    return out


def pcie_rule(ctx: RuleContext) -> list[Finding]:
    """PCIe AER and GPU-lost symptoms (``nvidia-smi`` cannot get a handle) -> ``GPU_LOST_PCIE``.

    Fatal/uncorrected AER: deterministic. Corrected AER together with a lost-GPU symptom: inferred.
    Corrected AER alone: a weak hint only (confidence below 0.5, root not established).
    """
    aer = ctx.kinds("pcie_aer")
    lost = [e for e in ctx.matching(_GPU_LOST_TEXT) if e.kind not in ("xid", "gpu_fell_off_bus")]
    lost += [e for e in ctx.kinds("gpu_handle_error") if e not in lost]
    # "NVRM: GPU 0000:81:00.0: RmInitAdapter failed! (0x25:0x40:1470)": the driver's resource manager could not bring
    # up a GPU that is present on PCI (open-gpu-kernel-modules, arch/nvalloc/unix/src/osinit.c RmInitAdapter); also a
    # driver/firmware mismatch can cause it, so alone it is a GPU lost on the PCIe side that is not established
    init_failed = [e for e in ctx.kinds("nvrm_other") if _RM_INIT_FAILED.search(text(e)) and e not in lost]
    if ctx.kinds("gpu_fell_off_bus") or any(xid_code(e) == 79 for e in ctx.kinds("xid")) or any(
            _GPU_IS_LOST.search(text(e)) for e in lost):
        return []  # the fallen-off-bus rule names it more precisely
    if not aer and not lost and init_failed:
        gpu = next((gpu_of(e) for e in init_failed if gpu_of(e)), None)
        return [finding(ctx, "GPU_LOST_PCIE", "rm_init_failed", Tier.HARDWARE, CONF_PRIOR, init_failed,
                        established=False, gpu=gpu,
                        note=f"The driver could not initialise GPU {gpu or '?'} ({init_failed[0].where}: RmInitAdapter "
                             "failed): the GPU is on the bus but does not come up; check the BMC/AER log for PCIe errors "
                             "and whether it survives a reboot before blaming the driver.")]
    if not aer and not lost:
        return []
    fatal = [e for e in aer if re.search(r"Uncorrect|Fatal", str(e.fields.get("severity_text", "")) + e.raw,
                                         re.IGNORECASE)]
    evs = sorted(lost + aer, key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    gpu = next((gpu_of(e) for e in lost if gpu_of(e)), None) or _gpu_from_text(lost) or next(
        (str(e.fields["device"]) for e in aer if e.fields.get("agent") == "nvidia" and e.fields.get("device")), None)
    if fatal:
        conf, est, how = entity_conf(fatal[0].host, gpu), True, "uncorrectable PCIe errors"
    elif lost and aer:
        conf, est, how = CONF_INFERRED + 0.05, True, "a GPU that no longer answers plus PCIe link errors"
    elif lost:
        conf, est, how = CONF_INFERRED - 0.05, True, "a GPU that no longer answers (no Xid line seen)"
    else:
        conf, est, how = CONF_PRIOR - 0.1, False, "corrected PCIe errors only (not fatal by themselves)"
    return [finding(ctx, "GPU_LOST_PCIE", "pcie_aer", Tier.HARDWARE, conf, evs, established=est, gpu=gpu,
                    note=f"GPU lost on the PCIe side: {how}.")]

