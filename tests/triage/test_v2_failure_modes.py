"""Issue 23 failure modes, each on real log lines from public threads (URL per case) or real torch output.

Lines are copied as printed (host names as the thread printed them); where a thread's excerpt gave only
some lines, only those are used.
"""

from __future__ import annotations

from gpufield.triage import analyze
from gpufield.triage.report.json_export import to_dict


def _run(tmp_path, text: str, name: str = "train.log"):
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return analyze([str(f)])


# https://github.com/JiaquanYe/TableMASTER-mmocr/issues/32 (maintainer: NaN grad-norm from mixed precision
# is normal when the loss converges)
MMOCR = (
    "2021-11-22 01:31:20,102 - mmocr - INFO - Epoch [1][100/62598]\tlr: 1.000e-03, eta: 6 days, 15:22:46, time: 0.539, "
    "data_time: 0.051, memory: 7239, loss_ce: 1.2757, horizon_bbox_loss: 0.2828, vertical_bbox_loss: 0.3507, "
    "loss: 1.9091, grad_norm: nan\n"
    "2021-11-22 01:32:34,502 - mmocr - INFO - Epoch [1][200/62598]\tlr: 1.000e-03, eta: 7 days, 15:55:58, time: 0.705, "
    "data_time: 0.002, memory: 7239, loss_ce: 0.5921, horizon_bbox_loss: 0.2210, vertical_bbox_loss: 0.1055, "
    "loss: 0.9186, grad_norm: 3.9772\n")
# https://github.com/bigscience-workshop/Megatron-DeepSpeed/issues/396 ("grad norm: nan" on every iteration)
MEGATRON = "".join(
    f" iteration     {i}/  250000 | consumed samples:        {i * 8} | consumed tokens:     {i * 16384} | elapsed "
    "time per iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | loss scale: 1.0 | "
    "grad norm: nan | actual seqlen:  2048 | number of skipped iterations:   0 | number of nan iterations:   0 | "
    "samples per second: 1.886 | TFLOPs: 78.46 |\n" for i in (5426, 5427, 5428))


def test_nan_grad_norm_with_finite_loss_is_a_warning_not_nan_loss(tmp_path):
    for text in (MMOCR, MEGATRON):
        res = _run(tmp_path, text)
        assert res.incidents == [], [(i.cls, i.note) for i in res.incidents]
        (msg, evs), = res.engine.warnings
        assert "grad" in msg and "not a failure" in msg and len(evs) >= 1
    assert "loss stayed finite" in _run(tmp_path, MMOCR).engine.warnings[0][0]
    d = to_dict(_run(tmp_path, MMOCR))
    assert d["incidents"] == [] and d["warnings"][0]["evidence"] == [f"{tmp_path / 'train.log'}:1"]


def test_nan_grad_norm_does_not_outrank_a_real_oom(tmp_path):
    # the mmocr lines, then a real CUDA OOM (case 28-style message, stanford_alpaca #223)
    oom = ("RuntimeError: CUDA out of memory. Tried to allocate 172.00 MiB (GPU 0; 31.75 GiB total capacity; "
           "30.12 GiB already allocated; 79.50 MiB free; 30.48 GiB reserved in total by PyTorch)\n")
    res = _run(tmp_path, MMOCR + oom)
    assert res.verdict.cls.startswith("CUDA_OOM") and [i.cls for i in res.incidents if i.cls == "NAN_LOSS"] == []


def test_deepspeed_loss_scale_at_minimum(tmp_path):
    # https://github.com/yangjianxin1/Firefly/issues/68 (fix: bf16)
    res = _run(tmp_path, "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                         "Exiting run.\n")
    assert res.verdict.cls == "LOSS_SCALE_COLLAPSE" and res.verdict.established
    assert "bf16" in res.verdict.action


def test_torchrun_forced_sigkill_is_not_host_oom(tmp_path):
    # https://github.com/aws-samples/amazon-eks-machine-learning-with-terraform-and-kubeflow/issues/93
    forced = ("[2024-04-10 16:04:34,970] torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown "
              "process 264 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL\n")
    failed = ("[2024-04-10 16:04:36,100] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
              "local_rank: 0 (pid: 264) of binary: /usr/bin/python3\n")
    res = _run(tmp_path, forced + failed)
    assert all(i.cls != "HOST_OOM_KILL" for i in res.incidents), [(i.cls, i.note) for i in res.incidents]
    # without the agent's line the same exit -9 keeps the (unestablished) host-OOM prior
    res = _run(tmp_path, failed)
    assert res.verdict.cls == "HOST_OOM_KILL" and not res.verdict.established


def test_xid45_caused_by_previous_nvlink_xid(tmp_path):
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150
    res = _run(tmp_path, "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
                         "previous Xid 149\n"
                         "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000002 caused by "
                         "previous Xid 149\n", "kern.log")
    v = res.verdict
    assert v.cls == "NVLINK_FAULT" and v.established and v.gpu == "0000:dc:00.0" and v.host is None
    assert "Xid 149" in v.note


def test_sigbus_inside_nccl_group_end_is_shm(tmp_path):
    # https://github.com/msr-fiddle/pipedream/issues/76 (fix: docker --shm-size)
    res = _run(tmp_path, "[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)\n"
                         "==== backtrace (tid:   3095) ====\n"
                         " 0 0x0000000000043090 killpg()  ???:0\n"
                         " 1 0x000000000018bb41 __nss_database_lookup()  ???:0\n"
                         " 2 0x000000000007587d ncclGroupEnd()  ???:0\n"
                         " 3 0x000000000007b0ef ncclGroupEnd()  ???:0\n"
                         " 4 0x0000000000059e97 ncclGetUniqueId()  ???:0\n")
    v = res.verdict
    assert v.cls == "CONTAINER_SHM_IPC" and v.established and "--shm-size" in v.action


def test_shm_permission_error_gets_the_permission_fix(tmp_path):
    # https://github.com/NVIDIA/nccl/issues/328 (fixed by chmod 777 /dev/shm)
    res = _run(tmp_path, "node08:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission "
                         "denied\n"
                         "node08:27106:27302 [0] NCCL INFO include/shm.h:41 -> 2\n"
                         "node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
                         "nccl-shm-recv-b7948f403864987a-0-3-0 (size 4460544)\n")
    v = res.verdict
    assert v.cls == "CONTAINER_SHM_IPC" and "chmod" in v.action and "--shm-size" not in v.action
    res = _run(tmp_path, "gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No "
                         "space left on device\n")  # https://github.com/NVIDIA/nccl/issues/290
    assert res.verdict.cls == "CONTAINER_SHM_IPC" and "--shm-size" in res.verdict.action


def test_system_error_with_nccl_sockets_on_a_veth_is_network_config(tmp_path):
    # https://github.com/Oneflow-Inc/oneflow/issues/3586: NCCL lists a container veth among its socket interfaces
    res = _run(tmp_path, "worker:101542:101542 [0] NCCL INFO Bootstrap : Using [0]eno1:172.18.40.41<0> "
                         "[1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>\n"
                         "worker:101542:101542 [0] NCCL INFO NET/IB : No device found.\n"
                         "worker:101542:101542 [0] NCCL INFO NET/Socket : Using [0]eno1:172.18.40.41<0> "
                         "[1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>\n"
                         "worker:101542:101934 [0] NCCL INFO Call to connect returned Connection timed out, retrying\n"
                         "worker:101542:101934 [0] NCCL INFO Call to connect returned Connection timed out, retrying\n")
    v = res.verdict
    assert v.cls == "NCCL_NETWORK_CONFIG" and "NCCL_SOCKET_IFNAME" in v.action and "veth25f2e72" in v.action


def test_ib_status_12_at_startup_without_roce_evidence_does_not_get_the_gid_fix(tmp_path):
    # shared case 06's line (NVIDIA/nccl #426): nothing in it says RoCE
    line = ("<host-A>:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, opcode 1, "
            "len 0, vendor err 129\n")
    v = _run(tmp_path, line).verdict
    assert v.cls == "IB_TRANSPORT_RETRY_EXCEEDED" and "ibstat" in v.action
    roce = "<host-A>:946:946 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n"
    v = _run(tmp_path, roce + line).verdict
    assert v.cls == "IB_TRANSPORT_RETRY_EXCEEDED" and v.action.startswith("Fix the RoCE addressing")


def test_remote_error_is_not_peer_exit_when_the_fabric_or_the_interfaces_explain_it(tmp_path):
    # the DistBackendError text torch prints for ncclRemoteError (ProcessGroupNCCL.cpp), after an IB status-12
    # line (shared case 06's format) or after NCCL chose a veth for its sockets (oneflow #3586's INFO lines)
    remote = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
              "ProcessGroupNCCL.cpp:1333, remote process exited or there was a network error, NCCL version 2.18.6\n")
    ib = ("<host-A>:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, opcode 1, "
          "len 0, vendor err 129\n")
    res = _run(tmp_path, ib + remote)
    assert res.verdict.cls == "IB_TRANSPORT_RETRY_EXCEEDED"
    assert any(c.cls == "PEER_PROCESS_EXIT" and c.verdict == "explained" for c in res.verdict.competitors)
    veth = ("worker:101542:101542 [0] NCCL INFO NET/Socket : Using [0]eno1:172.18.40.41<0> "
            "[1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>\n")
    res = _run(tmp_path, veth + remote)
    assert res.verdict.cls == "NCCL_NETWORK_CONFIG" and "veth25f2e72" in res.verdict.action
    assert _run(tmp_path, remote).verdict.cls == "PEER_PROCESS_EXIT"  # alone: a peer went away, root unknown
