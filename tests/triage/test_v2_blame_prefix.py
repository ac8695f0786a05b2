"""Issue 23: prefixes never take ``kernel:`` as a host; blame extraction stage (engine/blame.py)."""

from __future__ import annotations

from gpufield.triage.parsers._prefix import split_prefix


def test_journal_line_without_hostname_has_no_host():
    # journalctl / syslog forwarders that drop the hostname field: "<time> kernel: NVRM: ..."
    p = split_prefix("Jan 21 10:00:00 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen off "
                     "the bus.", 2026, 0, None)
    assert p.host is None and p.body.startswith("NVRM: Xid") and p.ts_ns is not None
    p = split_prefix("2026-01-21T10:00:00+0000 kernel: NVRM: Xid (PCI:0000:3b:00): 79", 2026, 0, None)
    assert p.host is None and p.body.startswith("NVRM: Xid")
    # with a hostname the host is still read
    p = split_prefix("May 18 19:02:39 gpu-node-7 kernel: [16450076.435595] NVRM: Xid", 2026, 0, None)
    assert p.host == "gpu-node-7" and p.mono_s == 16450076.435595
