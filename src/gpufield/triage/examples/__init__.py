"""Bundled example incidents (real log formats), triaged by a bare ``gpufield triage``.

``xid79-two-hosts/``: a 2-node x 8-GPU FSDP fine-tune (ranks 0-7 on ``node-a``, 8-15 on ``node-b``).

- ``node-b/kern.log`` (syslog format): boot lines, the ``NVRM: GPU at PCI:...: GPU-<uuid>`` map,
  then ``NVRM: Xid (PCI:0000:ab:00): 79 ... GPU has fallen off the bus`` for local GPU 5 (rank 13)
  and the slot's PCIe link going down.
- ``node-a/train.log``: torchrun banner, NCCL init (``busId``/rank map), ~210 training steps, then
  ``NET/IB : Got completion from peer 10.42.0.12 ... status=12 ... vendor err 129`` on rank 5
  (towards node-b), watchdog timeouts on ranks 0-7 for ``SeqNum=48213`` and a torchrun
  ``ChildFailedError`` (exit -6, SIGABRT).
- ``node-b/train.log``: the same for ranks 8-12, 14, 15; rank 13 hangs in the driver and never
  reports. node-b's clock runs 40 s ahead of node-a's, so by raw timestamps node-a's IB errors
  look *earlier* than the Xid; the engine corrects the skew from the shared SeqNum timeouts.
- ``node-a/kern.log``: a clean kernel log (nothing wrong on node-a).

Expected verdict: ``GPU_FELL_OFF_BUS`` on node-b, GPU 0000:ab:00.0 = rank 13 (from NCCL's ``Init``
line ``busId ab000``), action ``EXCLUDE_NODE``, with the IB errors, the 15 watchdog timeouts (every
rank but 13) and both ChildFailedErrors as its cascade.
``_make_xid79_two_hosts.py`` regenerates the files.
"""
