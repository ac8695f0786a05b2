"""Generate the bundled example incident `xid79-two-hosts` (deterministic: seed 7).

Run from the repository root: `python src/gpufield/triage/examples/_make_xid79_two_hosts.py`.
"""

import os
import random
from datetime import datetime, timedelta

random.seed(7)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xid79-two-hosts")
os.makedirs(f"{OUT}/node-a", exist_ok=True)
os.makedirs(f"{OUT}/node-b", exist_ok=True)
BUS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
UUIDS = {
    h: [
        f"GPU-{random.getrandbits(32):08x}-{random.getrandbits(16):04x}-{random.getrandbits(16):04x}-{random.getrandbits(16):04x}-{random.getrandbits(48):012x}"
        for _ in range(8)
    ]
    for h in "ab"
}
IP = {"a": "10.42.0.11", "b": "10.42.0.12"}
B_SKEW = timedelta(seconds=40)  # node-b's clock runs 40 s ahead of node-a's
T0 = datetime(2026, 3, 21, 1, 4, 40)
STEP0, NSTEPS, STEP_S = 48000, 214, 2.41
t_hang = T0 + timedelta(seconds=20 + NSTEPS * STEP_S)  # collective 48213 started
t_xid = t_hang + timedelta(seconds=1.7)
TIMEOUT_MS = 600000
SEQ = 48213


def glog(t, lvl="I", tid=48101, src="train.py:231"):
    return f"{lvl}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {tid} {src}]"


def tg(t, lvl="E", src="ProcessGroupNCCL.cpp:632"):
    return f"[{lvl}{t.month}{t:%d %H:%M:%S}.{t.microsecond:06d}{random.randint(100, 999)} {src}]"


def syslog(t, host):
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S} {host} kernel:"


def kern(host, skew, extra):
    tb = datetime(2026, 3, 20, 22, 51, 3) + skew
    lines = []
    mono = 4.112
    boot = [
        "Linux version 5.15.0-119-generic (buildd@lcy02-amd64-017) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #129-Ubuntu SMP",
        "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-119-generic root=UUID=4c1f0b2e ro iommu=pt intel_iommu=on",
        "DMI: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 04/11/2024",
        "pci 0000:00:00.0: [8086:09a2] type 00 class 0x088000",
        "mlx5_core 0000:1a:00.0: firmware version: 28.39.1002",
        "mlx5_core 0000:1a:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 97656Mbps",
        "nvidia: loading out-of-tree module taints kernel.",
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 509",
        "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-D10-1-1)  Thu Jun  6 18:04:55 UTC 2024",
        "nvidia-modeset: Loading NVIDIA UNIX Open Kernel Mode Setting Driver for x86_64  550.90.07",
        "[drm] [nvidia-drm] [GPU ID 0x00001800] Loading driver",
    ]
    for i, b in enumerate(boot):
        mono += 0.731 + i * 0.05
        lines.append(f"{syslog(tb + timedelta(seconds=mono), host)} [{mono:12.6f}] {b}")
    for i, bus in enumerate(BUS):
        mono += 0.213
        lines.append(
            f"{syslog(tb + timedelta(seconds=mono), host)} [{mono:12.6f}] NVRM: GPU at PCI:0000:{bus}:00: {UUIDS[host[-1]][i]}"
        )
    for i in range(8):
        mono += 0.31
        lines.append(
            f"{syslog(tb + timedelta(seconds=mono), host)} [{mono:12.6f}] mlx5_core 0000:{['1a', '3c', '4d', '5e', '9c', 'bc', 'cc', 'dc'][i]}:00.0 mlx5_{i}: Port: 1 Link ACTIVE"
        )
    mono += 1.9
    lines.append(
        f"{syslog(tb + timedelta(seconds=mono), host)} [{mono:12.6f}] nvidia-fabricmanager: Successfully configured all the available NVSwitches to route GPU NVLink traffic"
    )
    for k in range(6):
        mono += 2400 + k * 37.5
        lines.append(
            f"{syslog(tb + timedelta(seconds=mono), host)} [{mono:12.6f}] systemd-journald[812]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0, suggesting rotation."
        )
    for t_ev, text in extra:
        m = (t_ev + skew - tb).total_seconds()
        lines.append(f"{syslog(t_ev + skew, host)} [{m:12.6f}] {text}")
    return lines


# ---- node-b kernel log: the Xid 79 ----
kb = kern(
    "node-b",
    B_SKEW,
    [
        (
            t_xid,
            "NVRM: Xid (PCI:0000:ab:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        ),
        (
            t_xid + timedelta(microseconds=410),
            "NVRM: GPU 0000:ab:00.0: GPU has fallen off the bus.",
        ),
        (
            t_xid + timedelta(microseconds=530),
            "NVRM: A GPU crash dump has been created. If possible, please run",
        ),
        (
            t_xid + timedelta(microseconds=531),
            "NVRM: nvidia-bug-report.sh as root to collect this data before",
        ),
        (t_xid + timedelta(microseconds=532), "NVRM: the NVIDIA kernel module is unloaded."),
        (t_xid + timedelta(seconds=2.4), "pcieport 0000:a7:01.0: pciehp: Slot(21): Link Down"),
    ],
)
ka = kern("node-a", timedelta(0), [])
open(f"{OUT}/node-b/kern.log", "w").write("\n".join(kb) + "\n")
open(f"{OUT}/node-a/kern.log", "w").write("\n".join(ka) + "\n")


def nccl_init(host, rank0, skew):
    h = f"node-{host}"
    out = []
    pids = [48101 + i for i in range(8)] if host == "a" else [51220 + i for i in range(8)]
    for lr in range(8):
        pid = pids[lr]
        r = rank0 + lr
        p = f"{h}:{pid}:{pid} [{lr}]"
        if lr == 0:
            out.append(f"{p} NCCL INFO Bootstrap : Using eth0:{IP[host]}<0>")
            out.append(f"{p} NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)")
            out.append(f"{p} NCCL INFO cudaDriverVersion 12040")
            out.append(
                f"{p} NCCL INFO NCCL version 2.21.5+cuda12.4"
                if r == 0
                else f"{p} NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"
            )
        out.append(
            f"{p} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [4]mlx5_4:1/IB [5]mlx5_5:1/IB [6]mlx5_6:1/IB [7]mlx5_7:1/IB [RO]; OOB eth0:{IP[host]}<0>"
        )
        out.append(f"{p} NCCL INFO Using network IB")
        out.append(
            f"{p} NCCL INFO comm 0x{0x55D0C1A0 + lr * 0x1000:x} rank {r} nranks 16 cudaDev {lr} nvmlDev {lr} busId {BUS[lr]}000 commId 0x3f1c9a2b7e104d55 - Init START"
        )
        out.append(
            f"{p} NCCL INFO Setting affinity for GPU {lr} to {'ffffffff,00000000' if lr >= 4 else '00000000,ffffffff'}"
        )
        out.append(
            f"{p} NCCL INFO comm 0x{0x55D0C1A0 + lr * 0x1000:x} rank {r} nRanks 16 nNodes 2 localRanks 8 localRank {lr} MNNVL 0"
        )
        out.append(
            f"{p} NCCL INFO Channel 00/0 : {r}[{lr}] -> {(r + 1) % 16}[{(lr + 1) % 8}] via P2P/CUMEM/read"
        )
        out.append(f"{p} NCCL INFO Connected all rings")
        out.append(
            f"{p} NCCL INFO comm 0x{0x55D0C1A0 + lr * 0x1000:x} rank {r} nranks 16 cudaDev {lr} nvmlDev {lr} busId {BUS[lr]}000 commId 0x3f1c9a2b7e104d55 - Init COMPLETE"
        )
    return out


def header(host, t, skew):
    tt = t + skew
    return [
        f"{glog(tt, 'W', 139823, 'torch/distributed/run.py:793')} ",
        f"{glog(tt, 'W', 139823, 'torch/distributed/run.py:793')} *****************************************",
        f"{glog(tt, 'W', 139823, 'torch/distributed/run.py:793')} Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. ",
        f"{glog(tt, 'W', 139823, 'torch/distributed/run.py:793')} *****************************************",
        f"{glog(tt + timedelta(seconds=1.2), 'I', 139823, 'torch/distributed/elastic/agent/server/api.py:878')} [default] Rendezvous complete for workers. Result:",
        f"{glog(tt + timedelta(seconds=1.2), 'I', 139823, 'torch/distributed/elastic/agent/server/api.py:878')}   restart_count=0",
        f"{glog(tt + timedelta(seconds=1.2), 'I', 139823, 'torch/distributed/elastic/agent/server/api.py:878')}   master_addr=node-a",
        f"{glog(tt + timedelta(seconds=1.2), 'I', 139823, 'torch/distributed/elastic/agent/server/api.py:878')}   master_port=29500",
        f"{glog(tt + timedelta(seconds=1.2), 'I', 139823, 'torch/distributed/elastic/agent/server/api.py:878')}   group_world_size=2",
    ]


def timeouts(host, ranks, skew, extra_ms):
    out = []
    tt = t_hang + timedelta(milliseconds=TIMEOUT_MS) + skew
    for i, r in enumerate(ranks):
        ran = TIMEOUT_MS + extra_ms + i * 3
        t1 = tt + timedelta(milliseconds=extra_ms + i * 3)
        out.append(
            f"[rank{r}]:{tg(t1)} [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn=262668288, NumelOut=262668288, Timeout(ms)={TIMEOUT_MS}) ran for {ran} milliseconds before timing out."
        )
    for i, r in enumerate(ranks):
        t1 = tt + timedelta(milliseconds=extra_ms + 40 + i * 3)
        out.append(
            f"[rank{r}]:{tg(t1, src='ProcessGroupNCCL.cpp:1664')} [PG ID 0 PG GUID 0(default_pg) Rank {r}] Exception (either an error or timeout) detected by watchdog at work: {SEQ}, last enqueued NCCL work: {SEQ + 1}, last completed NCCL work: {SEQ - 1}."
        )
        out.append(
            f"[rank{r}]:{tg(t1, src='ProcessGroupNCCL.cpp:1709')} [PG ID 0 PG GUID 0(default_pg) Rank {r}] Timeout at NCCL work: {SEQ}, last enqueued NCCL work: {SEQ + 1}, last completed NCCL work: {SEQ - 1}."
        )
        out.append(
            f"[rank{r}]:{tg(t1, src='ProcessGroupNCCL.cpp:667')} [Rank {r}] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value."
        )
        out.append(
            f"[rank{r}]:{tg(t1, src='ProcessGroupNCCL.cpp:681')} [Rank {r}] To avoid data inconsistency, we are taking the entire process down."
        )
    return out


def teardown(host, rank0, skew, fail_lr, t_fail, exitcode, sig):
    tt = t_fail + skew
    pids = [48101 + i for i in range(8)] if host == "a" else [51220 + i for i in range(8)]
    out = []
    for lr in range(8):
        if lr == fail_lr:
            continue
        out.append(
            f"{glog(tt, 'W', 139823, 'torch/distributed/elastic/multiprocessing/api.py:897')} Sending process {pids[lr]} closing signal SIGTERM"
        )
    out.append(
        f"{glog(tt + timedelta(seconds=0.4), 'E', 139823, 'torch/distributed/elastic/multiprocessing/api.py:869')} failed (exitcode: {exitcode}) local_rank: {fail_lr} (pid: {pids[fail_lr]}) of binary: /usr/bin/python3"
    )
    out += [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/usr/local/lib/python3.11/dist-packages/torch/distributed/run.py", line 919, in main',
        "    run(args)",
        '  File "/usr/local/lib/python3.11/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {tt:%Y-%m-%d_%H:%M:%S}",
        f"  host      : node-{host}",
        f"  rank      : {rank0 + fail_lr} (local_rank: {fail_lr})",
        f"  exitcode  : {exitcode} (pid: {pids[fail_lr]})",
        "  error_file: <N/A>",
        f"  traceback : Signal {-exitcode} ({sig}) received by PID {pids[fail_lr]}",
        "============================================================",
    ]
    return out


# ---- node-a: ranks 0-7, rank 0 logs progress ----
a = header("a", T0, timedelta(0)) + nccl_init("a", 0, timedelta(0))
t = T0 + timedelta(seconds=20)
loss = 1.93
for k in range(NSTEPS):
    step = STEP0 + k
    loss = loss * 0.9995 + random.uniform(-0.02, 0.02)
    st = STEP_S + random.uniform(-0.04, 0.05)
    t += timedelta(seconds=st)
    a.append(
        f"[rank0]:{glog(t, 'I', 48101, 'train.py:231')} step {step} | loss {loss:.4f} | lr 2.40e-05 | grad_norm {random.uniform(0.35, 0.48):.3f} | tokens/s {int(4096 * 128 / st)} | step_time {st:.2f}s"
    )
    if k % 50 == 49:
        a.append(
            f"[rank0]:{glog(t, 'I', 48101, 'train.py:260')} eval step {step}: val_loss {loss + 0.07:.4f}"
        )
# IB errors on rank 5 of node-a towards node-b's mlx5_5 (rank 13's NIC), ~27 s after the Xid
for op in ("Recv", "Recv", "Send"):  # NCCL lines carry no timestamp (no NCCL_DEBUG_TIMESTAMP_FORMAT)
    a.append(
        f"node-a:48106:48613 [5] transport/net_ib.cc:1701 NCCL WARN NET/IB : Got completion from peer {IP['b']}<59213> with status=12 opcode={0 if op == 'Send' else 128} len=0 vendor err 129 ({op}) localGid ::ffff:{IP['a']} remoteGids::ffff:{IP['b']} hca mlx5_5"
    )
    a.append("node-a:48106:48613 [5] NCCL INFO transport/net.cc:1302 -> 6")
    a.append("node-a:48106:48613 [5] NCCL INFO proxy.cc:694 -> 6")
    a.append("node-a:48106:48613 [5] NCCL INFO proxy.cc:874 -> 6 [Progress Thread]")
a += timeouts("a", [0, 1, 2, 3, 4, 5, 6, 7], timedelta(0), 31)
a += teardown(
    "a", 0, timedelta(0), 3, t_hang + timedelta(milliseconds=TIMEOUT_MS + 2200), -6, "SIGABRT"
)
open(f"{OUT}/node-a/train.log", "w").write("\n".join(a) + "\n")

# ---- node-b: ranks 8-15; rank 13's GPU is gone: rank 13 hangs in the driver and never reports ----
b = header("b", T0, B_SKEW) + nccl_init("b", 8, B_SKEW)
tb = T0 + timedelta(seconds=20)
for k in range(0, NSTEPS, 25):
    tb2 = tb + timedelta(seconds=k * STEP_S)
    b.append(
        f"[rank8]:{glog(tb2 + B_SKEW, 'I', 51220, 'train.py:244')} dataloader: shard 3/16 prefetch ok, queue 8/8"
    )
b += timeouts("b", [8, 9, 10, 11, 12, 14, 15], B_SKEW, 44)
b += teardown("b", 8, B_SKEW, 0, t_hang + timedelta(milliseconds=TIMEOUT_MS + 2300), -6, "SIGABRT")
open(f"{OUT}/node-b/train.log", "w").write("\n".join(b) + "\n")
print(len(a), len(b), len(ka), len(kb))
