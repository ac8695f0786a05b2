"""Deadline (issue 26): the result is final by timeout + 1 s in every phase. Phases are slowed
artificially (``VerifyConfig.phase_hook`` or a monkeypatched bound pass) and the result file is
watched from another thread on ``time.monotonic()``: it must exist by then, say ``timeout`` or
``unknown``, and never change afterwards. A correctness check, not a speed target."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gpufield.verify import AlphaConfig, VerifyConfig, run_instance, verify_instance
from gpufield.verify.deadline import Deadline, ResultSeal

from . import nets

TIMEOUT_S = 2.0
BOX = "(declare-const X_0 Real)(declare-const X_1 Real)(declare-const Y_0 Real)" + "".join(
    f"(assert (>= X_{i} -1))(assert (<= X_{i} 1))" for i in range(2))


def _hard_unsat(tmp_path, seed=1):
    """A 2-12-12-1 net and ``Y_0 ≤ min − 1 %``: unsat by the exact MILP minimum, not proven by
    CROWN, so every phase (attack, bounds, alpha, branch and bound) runs."""
    rng = np.random.default_rng(seed)
    model, layers = nets.mlp(rng, [2, 12, 12, 1])
    onnx_p = nets.save(model, tmp_path / "net.onnx")
    exact = nets.milp_min(layers, np.full(2, -1.0), np.full(2, 1.0), np.array([1.0]))
    vnn = tmp_path / "p.vnnlib"
    vnn.write_text(BOX + f"(assert (<= Y_0 {exact - 0.01 * (1 + abs(exact))!r}))")
    return onnx_p, vnn, exact


class _Watch:
    """Records every distinct content of ``path`` with its ``time.monotonic()`` (calling
    ``on_first`` after each new one)."""

    def __init__(self, path: Path, on_first=None):
        self.path, self.seen, self.on_first = path, [], on_first
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            if self.path.exists():
                c = self.path.read_text()
                if c and (not self.seen or self.seen[-1][1] != c):
                    self.seen.append((time.monotonic(), c))
                    if self.on_first is not None:
                        self.on_first()
            time.sleep(0.01)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        time.sleep(0.05)
        self.stop.set()
        self.t.join()


@pytest.mark.parametrize("phase", ["attack", "bounds", "alpha", "bab"])
def test_stuck_phase_result_is_final_by_timeout_plus_1s(tmp_path, phase):
    """A phase that does not return by itself: the file says timeout by the deadline + 1 s and
    keeps saying it after the late verdict arrives."""
    onnx_p, vnn, _ = _hard_unsat(tmp_path)
    release, reached = threading.Event(), []

    def hook(name):
        reached.append(name)
        if name == phase:
            release.wait(20)

    cfg = VerifyConfig(phase_hook=hook, alpha=AlphaConfig(iterations=10))
    out = tmp_path / "result.txt"
    start = time.monotonic()
    with _Watch(out, on_first=release.set) as w:
        res = run_instance(onnx_p, vnn, out, timeout_s=TIMEOUT_S, config=cfg,
                           deadline=Deadline.after(TIMEOUT_S, start_s=start))
    assert phase in reached
    assert len(w.seen) == 1, w.seen  # written once, never changed
    t_first, content = w.seen[0]
    assert t_first - start <= TIMEOUT_S + 1.0, t_first - start
    assert content.split()[0] in ("timeout", "unknown") and res.verdict == "timeout"
    assert out.read_text() == content


def test_slow_rigid_bound_pass_is_not_started_late(tmp_path):
    """CROWN proves the property (IBP-style threshold far below the exact minimum) but the bound
    pass is slow: the float64 re-check, estimated from it, is not started past the deadline."""
    rng = np.random.default_rng(2)
    model, layers = nets.mlp(rng, [2, 8, 1])
    onnx_p = nets.save(model, tmp_path / "n.onnx")
    exact = nets.milp_min(layers, np.full(2, -1.0), np.full(2, 1.0), np.array([1.0]))
    vnn = tmp_path / "p.vnnlib"
    vnn.write_text(BOX + f"(assert (<= Y_0 {exact - 50.0!r}))")
    assert verify_instance(onnx_p, vnn, timeout_s=30).verdict == "unsat"  # decided when not slowed

    reached = []

    def hook(name):
        reached.append(name)
        if name == "bounds":
            time.sleep(0.9 * TIMEOUT_S / 2)  # inside the measured pass: float64 estimate 3x this

    start = time.monotonic()
    res = verify_instance(onnx_p, vnn, timeout_s=TIMEOUT_S, config=VerifyConfig(phase_hook=hook))
    assert time.monotonic() - start <= TIMEOUT_S + 1.0
    assert res.verdict == "timeout" and "bounds" in reached and "float64" not in reached, (res, reached)


def test_slow_alpha_iterations_stop_before_the_deadline(tmp_path, monkeypatch):
    """Each float32 α-CROWN bound pass takes 2.2 s (> the 1 s of slack): no iteration is started
    that would end after the deadline (checking only for a passed deadline overruns by 1.7 s)."""
    from gpufield.verify import alpha

    onnx_p, vnn, _ = _hard_unsat(tmp_path)
    real = alpha.bound_pass

    def slow(graph, spec, x_lo, *a, **k):
        if x_lo.dtype == torch.float32:
            time.sleep(2.2)
        return real(graph, spec, x_lo, *a, **k)

    monkeypatch.setattr(alpha, "bound_pass", slow)
    start = time.monotonic()
    res = verify_instance(onnx_p, vnn, timeout_s=3.0, config=VerifyConfig(refine=None))
    assert time.monotonic() - start <= 3.0 + 1.0
    assert res.verdict in ("timeout", "unknown")


def test_seal_keeps_the_first_writer():
    out: list[str] = []
    with ResultSeal(time.monotonic() + 0.05, lambda: out.append("timeout")) as s:
        time.sleep(0.3)
        assert not s.finish(lambda: out.append("unsat"))
    with ResultSeal(time.monotonic() + 5, lambda: out.append("timeout")) as s:
        assert s.finish(lambda: out.append("sat"))
    time.sleep(0.05)
    assert out == ["timeout", "sat"]


def test_process_start_counts_interpreter_start_up():
    """A fresh interpreter that sleeps 0.4 s before importing the (torch-free) module reports at
    least that much age."""
    code = "import time; time.sleep(0.4); import gpufield.deadline as d; print(time.monotonic() - d.process_start_s())"
    src = str(Path(importlib.util.find_spec("gpufield").origin).parents[1])
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}).stdout)
    assert 0.4 <= age < 30.0


def test_cli_result_is_final_by_timeout_plus_1s_from_process_start(tmp_path):
    """``python -m gpufield verify run`` with a 2 s timeout: interpreter start-up, importing torch and
    loading take about half of that here (more on a loaded machine), so the file must come from the
    seal armed before them."""
    onnx_p, vnn, _ = _hard_unsat(tmp_path)
    out = tmp_path / "r.txt"
    src = str(Path(importlib.util.find_spec("gpufield").origin).parents[1])
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gpufield", "verify", "run", str(onnx_p), str(vnn),
                             "--timeout", "2", "--out", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    # the rule counts from the process's own start (as the kernel records it, /proc/<pid>/stat field 22,
    # clock ticks since boot), not from this side of fork/exec, which a loaded 2-core machine delays
    with open(f"/proc/{proc.pid}/stat") as f:
        started_s = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    try:
        while not (out.exists() and out.read_text()) and time.monotonic() - start < 30:
            time.sleep(0.01)
        t = time.clock_gettime(time.CLOCK_BOOTTIME) - started_s
        assert t <= 2.0 + 1.0 + 0.02, t  # + one clock tick and the 10 ms poll
        assert out.read_text() == "timeout\n"
    finally:
        proc.kill()
        proc.wait()


def test_bench_row_is_final_by_timeout_plus_1s(tmp_path):
    """bench keeps the rule per instance: a stuck phase still gives its row, timeout, in time."""
    from gpufield.verify import bench

    d = tmp_path / "b"
    d.mkdir()
    onnx_p, vnn, _ = _hard_unsat(d)
    (d / "instances.csv").write_text(f"{Path(onnx_p).name},{vnn.name},{TIMEOUT_S}\n")
    release = threading.Event()
    cfg = VerifyConfig(phase_hook=lambda name: release.wait(20) if name == "bounds" else None)
    out = tmp_path / "res.csv"
    rows = lambda: out.read_text().count("\n") if out.exists() else 0  # noqa: E731
    start = time.monotonic()
    with _Watch(out, on_first=lambda: rows() == 2 and release.set()) as w:
        s = bench(d, out, config=cfg, progress=False)
    done = [t for t, c in w.seen if c.count("\n") == 2]  # header + the instance's row
    assert done and done[0] - start <= TIMEOUT_S + 1.0 and rows() == 2
    assert out.read_text().splitlines()[1].split(",")[4] == "timeout" and s.counts == {"timeout": 1}


def test_mip_workers_do_not_outlive_the_budget(tmp_path):
    """Spawned MIP workers take seconds to start (they import torch): the wait ends at the
    budget, the workers are killed, and the bounds returned still contain the real values."""
    from gpufield.verify.milp_bounds import milp_refine

    from .test_milp_bounds import _forward_pre, _net

    g64, layers, lo, hi, lo64, hi64, ref = _net(tmp_path, 6)
    start = time.monotonic()
    out, st = milp_refine(g64, lo64, hi64, ref, layers=2, workers=2, total_s=0.5)
    assert time.monotonic() - start <= 0.5 + 1.0, st.status
    pre = _forward_pre(layers, np.random.default_rng(0).uniform(lo, hi, (2000, len(lo))))
    for (lo_t, hi_t), z in zip((out[r.inputs[0]] for r in g64.relu_nodes()), pre, strict=True):
        assert (lo_t.numpy().reshape(-1) <= z.min(0) + 1e-9).all() and (hi_t.numpy().reshape(-1) >= z.max(0) - 1e-9).all()


def _gil_holding_regex_s(seconds: float) -> tuple[str, str]:
    """A pattern and text whose ``re.match`` holds the GIL about ``seconds`` (catastrophic backtracking:
    Python's ``re`` does not release the GIL while matching), the stand-in for importing torch."""
    import re as std_re

    n = 18
    while True:
        t0 = time.monotonic()
        std_re.match(r"(a+)+$", "a" * n + "b")
        if time.monotonic() - t0 >= seconds / 4 or n > 40:
            return r"(a+)+$", "a" * (n + 2) + "b"  # each extra 'a' doubles the time
        n += 1


def test_process_seal_fires_on_time_while_this_process_holds_the_gil(tmp_path):
    """The failure mode behind the CLI's late seal: a timer thread cannot run while the main thread holds
    the GIL; the forked backstop of ProcessResultSeal can."""
    import re as std_re

    from gpufield.deadline import ProcessResultSeal, ResultSeal, write_text_atomic

    pattern, text = _gil_holding_regex_s(1.0)
    for cls in (ResultSeal, ProcessResultSeal):
        out = tmp_path / f"{cls.__name__}.txt"
        end = time.monotonic() + 0.2
        seal = (cls(end, lambda out=out: write_text_atomic(out, "timeout\n")) if cls is ResultSeal
                else cls(end, out, "timeout\n"))
        with seal:
            t0, wall0 = time.monotonic(), time.time()
            std_re.match(pattern, text)  # holds the GIL well past end
            held = time.monotonic() - t0
            wrote = seal.finish(lambda out=out: write_text_atomic(out, "unsat\n"))
        assert held > 0.5
        if cls is ProcessResultSeal:  # sealed by the child at `end`, while the GIL was held: the late result lost
            assert (wrote, seal.sealed, out.read_text()) == (False, True, "timeout\n")
            assert out.stat().st_mtime < wall0 + held - 0.2  # written during the match, not after it
        else:  # the timer thread could not run during the match: the fallback came only after it
            assert (wrote, out.read_text()) == (False, "timeout\n")
            assert out.stat().st_mtime >= wall0 + held - 0.05


def test_process_seal_lets_an_early_result_through_and_leaves_no_child(tmp_path):
    from gpufield.deadline import ProcessResultSeal, write_text_atomic

    out = tmp_path / "r.txt"
    with ProcessResultSeal(time.monotonic() + 30, out, "timeout\n") as seal:
        pid = seal._pid
        assert seal.finish(lambda: write_text_atomic(out, "sat\n"))
    assert out.read_text() == "sat\n" and not seal.sealed
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped by __exit__
    # left without a result: the child stands down, nothing is written
    out2 = tmp_path / "r2.txt"
    with ProcessResultSeal(time.monotonic() + 30, out2, "timeout\n"):
        pass
    assert not out2.exists()
