"""``lspci -vvv`` Access Control Services lines: ``ACSCtl: SrcValid+ TransBlk- ReqRedir+ ...``.

With ACS source validation / request redirection enabled on a PCIe switch port, peer-to-peer
requests between a GPU and a NIC or another GPU are redirected through the root complex: P2P and
GPUDirect RDMA break or slow down (NCCL troubleshooting guide, "PCI Access Control Services";
NVIDIA/nccl #928 in the shared corpus). One ``pcie_acs`` event per ``ACSCtl`` line.
"""

from __future__ import annotations

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of
from gpufield.triage.protocols import LineContext

ACSCTL_RE = rx.compile(r"\bACSCtl:\s+SrcValid(?P<src>[+-])\s+TransBlk(?P<tb>[+-])\s+ReqRedir(?P<rr>[+-])\s+"
                       r"CmpltRedir(?P<cr>[+-])")


class LspciParser:
    """``lspci -vvv`` ACS control lines."""

    name = "lspci"
    source = "smi"
    prefilter = r"ACSCtl:\s+SrcValid"
    keywords = ("ACSCtl:",)

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one ``ACSCtl:`` line (``enabled`` = source validation or any redirect on)."""
        m = ACSCTL_RE.search(line)
        if not m:
            return None
        on = {k: m[k] == "+" for k in ("src", "tb", "rr", "cr")}
        return event("smi", "pcie_acs", ctx, line, prefix_of(line, ctx), severity="warning" if any(on.values()) else "info",
                     fields={"src_valid": on["src"], "req_redir": on["rr"], "cmplt_redir": on["cr"],
                             "enabled": on["src"] or on["rr"] or on["cr"]})
