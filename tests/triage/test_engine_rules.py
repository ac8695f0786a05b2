"""Rule-level engine tests on hand-built events, plus ablations of the bundled example (parsers used)."""

from __future__ import annotations

import shutil

import pytest
from test_engine import ev, watchdog

from gpufield.triage import analyze, example_dir
from gpufield.triage.engine import run_engine
from gpufield.triage.engine.phases import PhaseMark, scan_lines


def test_dcgm_xid_sample_names_the_gpu():
    raw = ('DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-1",pci_bus_id="00000000:5D:00.0",hostname="node-c"} 79')
    e = ev("metric_sample", raw, host="node-c", gpu_index=3, gpu_bdf="0000:5d:00.0",
           fields={"metric": "DCGM_FI_DEV_XID_ERRORS", "value": 79.0, "labels": {"gpu": "3"}})
    top = run_engine([e]).incidents[0]
    assert (top.cls, top.host, top.gpu, top.action_kind) == ("GPU_FELL_OFF_BUS", "node-c", "0000:5d:00.0",
                                                            "EXCLUDE_NODE")


def test_performance_findings_rank_after_failures():
    hot = ev("clock_event", "HW Slowdown : Active", host="n1", gpu_bdf="0000:18:00.0", t_s=0,
             fields={"reason": "HW Slowdown", "active": True})
    g = 2**30
    oom = ev("cuda_oom", "torch.cuda.OutOfMemoryError: CUDA out of memory.", host="n1", t_s=5,
             fields={"tried_bytes": g, "capacity_bytes": 80 * g, "allocated_bytes": 78 * g, "reserved_bytes": 78.5 * g})
    classes = [i.cls for i in run_engine([hot, oom]).incidents]
    assert classes == ["CUDA_OOM_CAPACITY", "STRAGGLER_THERMAL"]


def test_checkpoint_save_phase_makes_the_timeout_a_checkpoint_timeout():
    lines = ["[INFO] step 499 loss 1.92", "Saving model checkpoint to out/checkpoint-500", "noise"]
    marks = scan_lines(lines, "r0.log")
    assert [m.phase for m in marks] == ["checkpoint_save"]
    w = watchdog(1, None, None, seq=9051, op="_ALLGATHER_BASE", line=4, file="r0.log")
    assert run_engine([w], phases=marks).incidents[0].cls == "CHECKPOINT_SAVE_TIMEOUT"
    # a training step logged after the save: the save finished, the timeout is something else
    loss = ev("loss", "step 501 loss 1.90", file="r0.log", line=3, fields={"loss": 1.9, "step": 501})
    assert run_engine([loss, w], phases=marks).incidents[0].cls == "NCCL_COLLECTIVE_TIMEOUT"


def test_save_frame_in_the_traceback_after_the_timeout():
    marks = [PhaseMark("r.log", 12, "checkpoint_save", 'File "trainer.py", line 2350, in _save_checkpoint')]
    w = watchdog(0, None, None, seq=9051, line=3, file="r.log")
    assert run_engine([w], phases=marks).incidents[0].cls == "CHECKPOINT_SAVE_TIMEOUT"


def test_staggered_launch_is_launch_skew():
    early = ev("nccl_warn", "node-a:1:1 [0] NCCL WARN slow init", host="node-a", t_s=0, file="a.log")
    late = ev("nccl_warn", "node-b:1:1 [0] NCCL WARN slow init", host="node-b", t_s=900, file="b.log")
    hb = ev("heartbeat_timeout", "[PG 0 Rank 3] Heartbeat monitor timed out!", host="node-a", rank=3, t_s=610,
            file="a.log", line=5)
    top = run_engine([early, late, hb]).incidents[0]
    assert (top.cls, top.host, top.action_kind) == ("LAUNCH_SKEW", "node-b", "FIX_CONFIG")
    # rank 0's progress lines start early on node-a only: that is not a staggered launch
    steps = [ev("loss", f"step {s} loss 2.0", host="node-a", t_s=-600 + s, file="a.log", line=s,
                fields={"loss": 2.0}) for s in range(3)]
    early2 = ev("nccl_warn", "node-a:1:1 [0] NCCL WARN x", host="node-a", t_s=880, file="a.log", line=9)
    classes = [i.cls for i in run_engine([*steps, early2, late, hb]).incidents]
    assert "LAUNCH_SKEW" not in classes


def test_connect_failure_is_config_at_startup_and_a_peer_exit_mid_run():
    refused = ev("nccl_warn", "node-a:9:9 [0] misc/socket.cc:484 NCCL WARN Net : Connect to 10.0.0.2<43255> failed : "
                 "Connection refused", host="node-a", t_s=10, file="a.log", line=9)
    assert run_engine([refused]).incidents[0].cls == "NCCL_NETWORK_CONFIG"
    step = ev("loss", "step 10 loss 2.0", host="node-a", t_s=1, file="a.log", line=1, fields={"loss": 2.0})
    gone = ev("nccl_remote_error", "node-a:9:9 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote "
              "peer node-b<4321>", host="node-a", t_s=20, file="a.log", line=12)
    top = run_engine([step, refused, gone]).incidents[0]
    assert top.cls == "PEER_PROCESS_EXIT" and top.root_cause == "UNKNOWN" and top.action_kind == "RETRY"


def test_watchdog_that_ran_far_past_its_timeout_is_blocked():
    w = watchdog(2, "h", 0, ran=2_400_000)  # 40 min on a 10 min timeout
    top = run_engine([w]).incidents[0]
    assert top.cls == "WATCHDOG_BLOCKED" and top.root_cause == "UNKNOWN"


def test_ib_errors_from_two_hosts_naming_one_peer_blame_that_peer():
    def ib(host, line):
        return ev("ib_completion_error", f"{host}:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<5000> "
                  "with status=12", host=host, file=f"{host}.log", line=line, t_s=line,
                  fields={"status": 12, "peer": "10.0.0.9<5000>"})
    top = run_engine([ib("n1", 1), ib("n2", 2), ib("n3", 3)]).incidents[0]
    assert (top.cls, top.host, top.confidence) == ("IB_TRANSPORT_RETRY_EXCEEDED", "10.0.0.9", 0.9)
    assert top.action_kind == "FIX_CONFIG"  # no training step before it: startup -> RoCE/GID configuration


def test_example_without_the_kernel_log_still_points_at_node_b(tmp_path):
    """Ablation: with node-b's kernel log gone, the IB retry errors towards node-b lead and the
    watchdog timeouts name rank 13 as the one rank that never reported."""
    d = tmp_path / "job"
    shutil.copytree(example_dir(), d)
    (d / "node-b" / "kern.log").unlink()
    res = analyze([str(d)])
    top = res.incidents[0]
    # node-b's NCCL bootstrap line maps 10.42.0.12 to node-b
    assert (top.cls, top.host, top.action_kind) == ("IB_TRANSPORT_RETRY_EXCEEDED", "node-b", "EXCLUDE_NODE")
    assert "NCCL_COLLECTIVE_TIMEOUT" in top.cascade_classes
    missing = [f.facts.get("missing") for f in res.engine.findings if f.cls == "NCCL_COLLECTIVE_TIMEOUT"]
    assert missing == ["13"]


def test_example_variant_with_renamed_hosts_and_another_gpu(tmp_path):
    d = tmp_path / "job"
    shutil.copytree(example_dir(), d)
    for f in d.rglob("*.log"):
        t = f.read_text(encoding="utf-8").replace("node-b", "gpu-r12-07").replace("node-a", "gpu-r12-03")
        f.write_text(t.replace("0000:ab:00", "0000:5d:00").replace("PCI:0000:ab", "PCI:0000:5d"), encoding="utf-8")
    top = analyze([str(d)]).incidents[0]
    assert (top.cls, top.host, top.gpu) == ("GPU_FELL_OFF_BUS", "gpu-r12-07", "0000:5d:00.0")


@pytest.mark.parametrize("line,phase", [
    ("Generating train split: 2230000 examples [29:59, 1466.92 examples/s]", "setup"),
    ("Map (num_proc=8):  45%|████▌     | 4500/10000", "setup"),
    ("Running tokenizer on dataset: 100%", "setup"),
    ("Loading checkpoint shards: 100%|██████████| 4/4", "setup"),
    ('  File "/x/transformers/modeling_utils.py", line 3850, in from_pretrained', "setup"),
    ("Saving model checkpoint to out/checkpoint-500", "checkpoint_save"),
    ("[Torch] Checkpoint global_step500 is about to be saved!", "checkpoint_save"),
    (" saving checkpoint at iteration    2000 to /ckpt", "checkpoint_save"),
    ('  File "/x/deepspeed/runtime/engine.py", line 3500, in save_16bit_model', "checkpoint_save"),
    ("successfully saved checkpoint at iteration    2000 to /ckpt", "checkpoint_done"),
    ("step 48000 | loss 1.8423 | lr 2.40e-05 | grad_norm 0.412", None),
])
def test_phase_banners_survive_the_keyword_prefilter(line, phase):
    marks = scan_lines(["x", line, "y"], "f.log")
    assert [m.phase for m in marks] == ([phase] if phase else [])
    assert not marks or marks[0].line == 2


def test_healthy_progress_lines_and_unrelated_errors_do_not_fire():
    healthy = [ev("skipped_step", f"[Rank 0] step={s}, skipped=0, lr=[0.0001]", line=s, fields={"step": s, "skipped": 0})
               for s in range(1, 4)]
    hub = ev("python_exception", "requests.exceptions.ConnectionError: Failed to resolve 'huggingface.co'",
             line=9, fields={"exc_type": "requests.exceptions.ConnectionError"})
    classes = [i.cls for i in run_engine([*healthy, hub]).incidents]
    assert "SILENT_SKIPPED_STEPS" not in classes and "NCCL_NETWORK_CONFIG" not in classes
    assert classes == ["UNKNOWN"]  # an uncaught exception: code/data fault, fixed before a rerun
    assert run_engine([*healthy, hub]).incidents[0].action_kind == "FIX_CONFIG"


def test_a_few_early_overflow_skips_do_not_outrank_a_collective_timeout():
    skip = ev("loss_scale_overflow", "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, "
              "reducing to 32768.0", line=1, t_s=0, fields={"loss_scale": 65536.0, "new_loss_scale": 32768.0})
    w = watchdog(0, None, 900, line=50, file="a.log")
    res = run_engine([skip, w])  # issue 23 clean-run discipline: a lone skip is a warning, not an incident
    assert [i.cls for i in res.incidents] == ["NCCL_COLLECTIVE_TIMEOUT"]
    assert "normal loss-scale calibration" in res.warnings[0][0]
    floor = ev("loss_scale_overflow", "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1",
               line=2, t_s=1, fields={"loss_scale": 2.0, "new_loss_scale": 1.0})
    assert run_engine([skip, floor, w]).incidents[0].cls == "LOSS_SCALE_COLLAPSE"  # scale hit 1: established


def test_timeout_right_after_the_end_of_training_summary_is_a_checkpoint_timeout(tmp_path):
    """HF Trainer prints its train_runtime summary, then saves the model; a timeout there is the save."""
    f = tmp_path / "rank0.log"
    f.write_text(
        "{'loss': 1.3021, 'learning_rate': 1e-05, 'epoch': 2.9}\n"
        "{'train_runtime': 3512.4, 'train_samples_per_second': 3.1, 'train_steps_per_second': 0.1, "
        "'train_loss': 1.31, 'epoch': 3.0}\n"
        "100%|##########| 120/120 [58:32<00:00, 29.27s/it]\n"
        "[E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5121, "
        "OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1800412 milliseconds before timing out.\n",
        encoding="utf-8")
    top = analyze([str(f)]).incidents[0]
    assert top.cls == "CHECKPOINT_SAVE_TIMEOUT" and top.action_kind == "FIX_CONFIG"


def test_seqnum_mismatch_during_a_save_stays_a_desync_and_says_so():
    marks = [PhaseMark("r.log", 1, "checkpoint_save", "Saving model checkpoint to out/checkpoint-900")]
    evs = [watchdog(0, None, None, seq=122, op="_REDUCE_SCATTER_BASE", line=2, file="r.log"),
           watchdog(1, None, None, seq=126, op="_ALLGATHER_BASE", line=3, file="r.log")]
    top = run_engine(evs, phases=marks).incidents[0]
    assert top.cls == "COLLECTIVE_DESYNC" and "checkpoint save" in top.note and top.action_kind == "FIX_CONFIG"


def test_address_book_and_gpu_ranks_come_from_nccl_init_events(tmp_path):
    from gpufield.triage.engine import topology
    from gpufield.triage.ingest import ingest

    p = tmp_path / "nccl.log"
    p.write_text(
        "node-b:51220:51220 [0] NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>\n"
        "[rank9]:node-b:51221:51221 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.42.0.12<0>\n"
        "gpu7:9:9 [0] NCCL INFO NET/Socket : Using [0]ens1:192.168.1.7<0> [1]ens2:192.168.2.7<0>\n"
        # a 2-rank sub-communicator first, then the world communicator: the world's rank wins
        "node-b:51225:51300 [5] NCCL INFO comm 0x7f3a rank 1 nranks 2 cudaDev 5 nvmlDev 5 busId ab000 commId 0x9 - Init START\n"
        "node-b:51225:51225 [5] NCCL INFO comm 0x55d0c6a0 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId ab000 "
        "commId 0x3f1c9a2b7e104d55 - Init COMPLETE\n"
        "gpu7:9:9 [1] NCCL INFO comm 0x7f00 rank 1 nranks 8 cudaDev 1 busId 11b000 commId 0x1 - Init START\n")
    evs = ingest([p]).events
    assert [e.kind for e in evs] == ["nccl_bootstrap"] * 3 + ["nccl_init"] * 3
    topo = topology.from_events(evs)
    assert topo.ip_host == {"10.42.0.12": "node-b", "192.168.1.7": "gpu7", "192.168.2.7": "gpu7"}
    assert topo.gpu_rank == {("node-b", "0000:ab:00.0"): 13, ("gpu7", "0001:1b:00.0"): 1}
    # the engine builds the same maps itself; an explicit topology overrides them
    tl = run_engine(evs).timeline
    assert tl.gpu_rank[("node-b", "0000:ab:00.0")] == 13 and tl.ip_host["192.168.2.7"] == "gpu7"
    forced = topology.Topology(gpu_rank={("node-b", "0000:ab:00.0"): 99})
    assert run_engine(evs, topology=forced).timeline.gpu_rank[("node-b", "0000:ab:00.0")] == 99
    assert run_engine(evs).incidents == []  # init lines are topology, never a finding
