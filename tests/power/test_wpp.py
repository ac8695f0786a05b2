"""Workload power profiles (Max-Q / Max-P): read-only queries, shadow intents, allow-listed writes.

NVML is gpufield.testing.FakeNvml with a configured profile table (ids, priorities, conflicts and a
requested mask); expected values are that configuration, not the actuator's code. The pynvml
structures are the real ``c_nvmlWorkloadPowerProfile*`` ctypes types, passed with ``ctypes.byref``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pynvml
import pytest

from gpufield.errors import ActuationError
from gpufield.power.actuators.dryrun import DryRunActuator, ReadOnlyNvml
from gpufield.power.actuators.nvml import NvmlActuator
from gpufield.power.actuators.wpp import (
    PROFILE_IDS,
    WorkloadProfileActuator,
    mask_bits,
    read_workload_profiles,
)
from gpufield.power.config import WriteConfig
from gpufield.testing import FakeNvml, h200

MAX_P, MAX_Q, BALANCED = pynvml.NVML_POWER_PROFILE_MAX_P, pynvml.NVML_POWER_PROFILE_MAX_Q, pynvml.NVML_POWER_PROFILE_BALANCED


def _gpu(**kw):
    return h200(0, workload_profiles={MAX_P: 1, MAX_Q: 2, BALANCED: 3},
                workload_conflicts={MAX_P: {MAX_Q}, MAX_Q: {MAX_P}}, requested_profiles={BALANCED}, **kw)


def test_profile_ids_are_pynvmls_constants_and_mask_bits_cross_words():
    assert PROFILE_IDS["max-p"] == MAX_P == 0 and PROFILE_IDS["max-q"] == MAX_Q == 1
    assert PROFILE_IDS["balanced"] == BALANCED
    m = pynvml.c_nvmlMask255_t()
    m.mask[0], m.mask[1], m.mask[7] = 1 | (1 << 31), 1, 1 << 30
    assert mask_bits(m) == [0, 31, 32, 7 * 32 + 30]


def test_hopper_without_profiles_reads_as_unsupported_through_the_read_only_proxy():
    fake = FakeNvml.spy([h200(0)])
    fake.nvmlInit()
    wp = read_workload_profiles(ReadOnlyNvml(fake), fake.nvmlDeviceGetHandleByIndex(0))
    assert not wp.supported and "NotSupported" in wp.reason and wp.available == ()


def test_read_reports_the_configured_table_and_masks():
    fake = FakeNvml.spy([_gpu()])
    fake.nvmlInit()
    wp = read_workload_profiles(ReadOnlyNvml(fake), fake.nvmlDeviceGetHandleByIndex(0))
    assert wp.supported and wp.available == (MAX_P, MAX_Q, BALANCED)
    assert wp.priority == {MAX_P: 1, MAX_Q: 2, BALANCED: 3}
    assert wp.conflicts == {MAX_P: (MAX_Q,), MAX_Q: (MAX_P,), BALANCED: ()}
    assert wp.requested == (BALANCED,) and wp.enforced == (BALANCED,)
    assert fake.setter_calls == []


def test_shadow_logs_the_request_and_calls_no_setter():
    fake = FakeNvml.spy([_gpu()])
    with DryRunActuator(nvml=fake) as dry:
        act = WorkloadProfileActuator(dry)
        enforced = act.set_workload_profile(h200(0).uuid, "max-q", lane="decode", reason="calibrated")
    assert enforced == (BALANCED,) and fake.gpus[0].requested_profiles == {BALANCED}
    assert [(i.action, i.value, i.lane) for i in act.intents] == [("workload_profile", MAX_Q, "decode")]
    assert fake.setter_calls == []


def test_write_requests_reads_back_arbitration_and_restores_only_its_bits(tmp_path):
    fake = FakeNvml([_gpu()])
    uuid = h200(0).uuid
    wc = WriteConfig(allow_uuids=frozenset({uuid}), i_own_this_gpu=True, state_dir=str(tmp_path))
    with NvmlActuator(wc, nvml=fake, install_signal_handlers=False) as inner:
        act = WorkloadProfileActuator(inner)
        assert act.set_workload_profile(uuid, "max-q", lane="decode") == (MAX_Q, BALANCED)
        # Max-P conflicts with Max-Q and has the lower priority number: the firmware (fake) enforces Max-P
        assert act.set_workload_profile(uuid, "max-p", lane="decode") == (MAX_P, BALANCED)
        assert fake.gpus[0].requested_profiles == {MAX_P, MAX_Q, BALANCED}
        with pytest.raises(ValueError, match="profile must be one of"):
            act.set_workload_profile(uuid, "turbo")
        fake.gpus[0].workload_profiles.pop(BALANCED)
        with pytest.raises(ActuationError, match="not offered"):
            act.set_workload_profile(uuid, "balanced")
        fake.gpus[0].workload_profiles[BALANCED] = 3
        act.restore_defaults(uuid)
        assert fake.gpus[0].requested_profiles == {BALANCED}  # the operator's own request stays
    names = [n for n, _ in fake.setter_calls]
    assert names.count("nvmlDeviceWorkloadPowerProfileSetRequestedProfiles") == 2
    assert names.count("nvmlDeviceWorkloadPowerProfileClearRequestedProfiles") == 1


def test_a_gpu_outside_the_allow_list_is_only_logged(tmp_path):
    fake = FakeNvml([_gpu()])
    with NvmlActuator(WriteConfig(state_dir=str(tmp_path)), nvml=fake, install_signal_handlers=False) as inner:
        act = WorkloadProfileActuator(inner)
        act.set_workload_profile(h200(0).uuid, "max-q")
    assert fake.setter_calls == [] and len(act.intents) == 1


def test_device_query_script_is_read_only_and_reports_support():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "power_wpp_query.py"
    spec = importlib.util.spec_from_file_location("power_wpp_query", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fake = FakeNvml.spy([_gpu(), h200(1)])
    rec = mod.query(fake)
    assert rec["unchanged"] is True and fake.setter_calls == []
    assert rec["gpus"][h200(0).uuid]["workload_profiles"]["available"] == (MAX_P, MAX_Q, BALANCED)
    assert rec["gpus"][h200(1).uuid]["workload_profiles"]["supported"] is False


def _run_config(tmp_path, url):
    from test_power_run import _config

    from gpufield.power.lanes_config import load_run_config

    p = _config(tmp_path, url)
    p.write_text(p.read_text().replace('engine = "vllm"', 'engine = "vllm"\nplan = "fixed"\nworkload_profile = "max-q"'))
    cfg = load_run_config(p)
    assert cfg.lanes[0].workload_profile == "max-q"
    return cfg


def _fakes(**kw):
    return FakeNvml([_gpu(), h200(1, workload_profiles={MAX_P: 1, MAX_Q: 2}), h200(2)], clock=lambda: 0.0, **kw)


def test_power_run_uses_the_profile_as_a_decode_actuator(tmp_path):
    import json

    from test_power_run import _Engine

    from gpufield.power.serve import run_lanes

    eng = _Engine()
    try:
        (tmp_path / "shadow").mkdir()
        cfg = _run_config(tmp_path / "shadow", eng.url)
        fake = _fakes(read_only=True)
        s = run_lanes(cfg, nvml=fake, max_ticks=2, echo=lambda m: None)
        recs = [json.loads(x) for x in open(s.log_path)]
        got = sorted((r["gpu"], r["value"]) for r in recs if r["event"] == "intent" and r["action"] == "workload_profile")
        assert got == sorted((h200(i).uuid, "max-q") for i in (0, 1))
        assert fake.setter_calls == [] and fake.gpus[0].requested_profiles == {BALANCED}
        (tmp_path / "write").mkdir()
        cfg = _run_config(tmp_path / "write", eng.url)
        fake = _fakes()
        seen = []
        orig = fake.nvmlDeviceGetCurrentClocksEventReasons

        def spy(h):  # read-back during the run: what the decode GPUs have requested
            seen.append((h.index, frozenset(fake.gpus[h.index].requested_profiles)))
            return orig(h)
        fake.nvmlDeviceGetCurrentClocksEventReasons = spy
        s = run_lanes(cfg, nvml=fake, write=True, allow=[h200(i).uuid for i in range(3)], max_ticks=2,
                      echo=lambda m: None)
        assert (0, frozenset({MAX_Q, BALANCED})) in seen and (1, frozenset({MAX_Q})) in seen
        assert fake.gpus[0].requested_profiles == {BALANCED} and fake.gpus[1].requested_profiles == set()
        assert s.unchanged
    finally:
        eng.close()


def test_power_run_refuses_a_profile_the_gpus_do_not_offer(tmp_path):
    from test_power_run import _Engine

    from gpufield.power.serve import run_lanes

    eng = _Engine()
    try:
        cfg = _run_config(tmp_path, eng.url)
        fake = FakeNvml.spy([h200(i) for i in range(3)], clock=lambda: 0.0)
        with pytest.raises(ActuationError, match=r"workload power profile max-q: GPU-\S+ has none \(NVMLError_NotSupported"):
            run_lanes(cfg, nvml=fake, max_ticks=1, echo=lambda m: None)
    finally:
        eng.close()
