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


# --- the blame stage (engine/blame.py) -----------------------------------------------------------
from gpufield.triage.engine import blame  # noqa: E402
from gpufield.triage.engine.echo import is_echo  # noqa: E402
from gpufield.triage.events import Event  # noqa: E402


def test_host_from_slurm_kubernetes_and_child_failed_text():
    # Slurm's srun task error (src/srun/step_launch: "srun: error: %s: task %s: %s")
    assert blame.host_in_text("srun: error: gpu-node-17: task 3: Killed") == "gpu-node-17"
    assert blame.host_in_text("SLURMD_NODENAME=dgx-a07 SLURM_PROCID=3") == "dgx-a07"
    assert blame.host_in_text("KUBERNETES_NODE_NAME=gke-pool-h100-7f2 RANK=12") == "gke-pool-h100-7f2"
    assert blame.host_in_text("  host      : node-b.cluster\n") == "node-b.cluster"
    assert blame.host_in_text("kernel: NVRM: Xid (PCI:0000:dc:00): 45") is None


def test_rank_peer_and_gpu_extraction():
    assert blame.rank_in_text("WORLD_SIZE=16 RANK=11 LOCAL_RANK=3") == 11
    assert blame.rank_in_text("LOCAL_RANK=3") is None
    # NCCL's peer forms: "<ip><port>" and ip:port; an IB device:port
    assert blame.peer_in_text("Got completion from peer 10.3.1.12<50173> with status=12") == "10.3.1.12:50173"
    assert blame.peer_in_text("connect to 10.3.1.12:29500 failed") == "10.3.1.12:29500"
    assert blame.peer_in_text("NET/IB : Using [0]mlx5_0:1/RoCE") == "mlx5_0:1"
    # a UUID-only line joined to its bus id through the host's nvidia-smi / NVRM map
    e = Event("cuda", "cuda_error", "a.log", 3, "GPU-6b2e3b2d-0e2c-7d5a-33e1-d0a6b3f6b0c1 uncorrectable ECC",
              host="node-b", gpu_uuid="GPU-6b2e3b2d-0e2c-7d5a-33e1-d0a6b3f6b0c1")
    m = {("node-b", "0000:3b:00.0"): "GPU-6b2e3b2d-0e2c-7d5a-33e1-d0a6b3f6b0c1"}
    b = blame.extract([e], m)
    assert (b.host, b.gpu) == ("node-b", "0000:3b:00.0") and dict(b.why)["gpu"] == "a.log:3"


def test_busy_rank_is_the_one_that_did_not_time_out():
    assert blame.busy_rank([1], [1]) == 0                # shared case 02: rank 1 waited, rank 0 tokenised
    assert blame.busy_rank([0, 1, 3], [0, 1, 2, 3]) == 2
    assert blame.busy_rank([0, 1], [0, 1]) is None        # every known rank waited: the busy one is not in the input
    assert blame.busy_rank([1, 2], [1, 2], world=8) is None


def test_setup_timeout_blames_the_busy_rank_not_the_victim(shared_dir):
    import glob

    from gpufield.triage import analyze

    v = analyze(glob.glob(str(shared_dir / "data/triage-cases/02-*.log"))).verdict
    assert v.cls == "SETUP_PHASE_TIMEOUT" and v.rank == 0 and "Rank 0 is the only rank that did not time out" in v.note


def test_echoed_commands_and_banners_are_not_evidence(tmp_path):
    from gpufield.triage import analyze

    # a shell trace, help text, an argparse dump and a prompt that quote real message texts
    f = tmp_path / "job.out"
    f.write_text('+ python train.py --stop-if "loss is nan" --max-restarts 3\n'
                 "  --skip_nan        skip a step whose loss is NaN (default: False)\n"
                 "Namespace(ib_status='NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129')\n"
                 '$ echo "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5000> with status=12 opcode=0"\n',
                 encoding="utf-8")
    res = analyze([str(f)])
    assert res.incidents == [] and "echoed command" in res.engine.warnings[0][0]
    assert not is_echo("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert not is_echo("node1:100:100 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12")
