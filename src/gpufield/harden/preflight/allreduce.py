"""A short local all-reduce in a real ``torch.distributed`` process group: NCCL across the GPUs, gloo on CPU.

One subprocess per rank (``gpufield.harden.preflight._allreduce_worker``), rendezvous over TCP on
127.0.0.1, the whole run bounded by ``config.allreduce_timeout_s`` (a rank that never joins is
killed, the check fails). The result is checked for correctness, and the time of the slowest rank's
median all-reduce gives, as nccl-tests defines them (``doc/PERFORMANCE.md``):

* ``algbw = bytes / time``;
* ``busbw = algbw x 2 (n - 1) / n`` for an all-reduce over ``n`` ranks (the per-link traffic a
  ring sends, comparable across rank counts).

On GPUs ``busbw`` is compared with one direction of the NVLink bandwidth in the spec catalogue
(``gpu_spec(name).nvlink_bandwidth_bytes_per_s / 2``): below ``min_busbw_fraction`` of it warns.
Small messages do not reach peak, so raise ``allreduce_bytes`` (``--allreduce-mib``) for a tight
comparison. Gloo on CPU has no catalogue figure; its bandwidth is reported only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpufield.harden.preflight._common import MIB, WEDGED_FIX, result
from gpufield.harden.preflight.model import CheckResult, PreflightContext

__all__ = ["AllReduce", "bus_bandwidth"]


def bus_bandwidth(nbytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in bytes/s of one all-reduce (nccl-tests definitions).

    Args:
        nbytes: message size in bytes.
        time_s: time of one all-reduce, s (> 0).
        world_size: ranks (>= 1).

    Returns:
        ``(nbytes / time_s, nbytes / time_s * 2 * (n - 1) / n)``.

    Raises:
        ValueError: ``time_s <= 0`` or ``world_size < 1``.
    """
    if time_s <= 0 or world_size < 1:
        raise ValueError(f"need time_s > 0 and world_size >= 1, got {time_s}, {world_size}")
    alg = nbytes / time_s
    return alg, alg * 2 * (world_size - 1) / world_size


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _src_root() -> str:
    import gpufield

    return str(Path(gpufield.__file__).resolve().parent.parent)


class AllReduce:
    """A real all-reduce across local ranks completes, is correct, and (on GPUs) reaches its bandwidth."""

    name = "comm.allreduce"
    description = "short local all-reduce (NCCL on GPUs, gloo on CPU) with bus bandwidth"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the module docstring."""
        cfg = ctx.config
        backend, world, gpus = cfg.allreduce_backend, cfg.allreduce_cpu_ranks, []
        if backend in ("auto", "nccl"):
            st = ctx.nvml_state()
            if st.timeout is not None:
                return result(self.name, "fail", f"not run: {st.timeout}", fix=WEDGED_FIX)
            gpus = list(st.gpus)
            cvd = ctx.environ.get("CUDA_VISIBLE_DEVICES")
            if cvd is not None:  # NVML ignores it; CUDA (and so each rank's cuda:<rank>) does not
                gpus = gpus[:len([d for d in cvd.split(",") if d.strip()])]
            if len(gpus) >= 2:
                backend, world = "nccl", len(gpus)
            elif backend == "nccl":
                return result(self.name, "skip", f"NCCL all-reduce needs >= 2 GPUs, found {len(gpus)} "
                              "(NVML's, limited by CUDA_VISIBLE_DEVICES)")
            else:
                backend = "gloo"
        values = {"backend": backend, "world_size": world, "bytes": cfg.allreduce_bytes, "iters": cfg.allreduce_iters}
        out = self._launch(backend, world, cfg.allreduce_bytes, cfg.allreduce_iters, cfg.allreduce_timeout_s)
        if isinstance(out, str):
            return result(self.name, "fail", out, values=values,
                          fix="run again with NCCL_DEBUG=INFO; check /dev/shm, NCCL_SOCKET_IFNAME and the GPUs")
        alg, bus = bus_bandwidth(out["bytes"], out["time_s"], world)
        values.update(time_s=out["time_s"], init_s=round(out["init_s"], 3), algbw_gb_per_s=round(alg / 1e9, 3),
                      busbw_gb_per_s=round(bus / 1e9, 3), correct=out["correct"])
        size = f"{out['bytes'] / MIB:g} MiB"
        head = f"{backend} all-reduce over {world} ranks, {size}: {out['time_s'] * 1e3:.2f} ms, busbw {bus / 1e9:.2f} GB/s"
        if not out["correct"]:
            return result(self.name, "fail", head + "; WRONG RESULT", values=values,
                          fix="a rank computed a wrong sum: suspect GPU memory or the interconnect; drain the node")
        if backend != "nccl":
            return result(self.name, "pass", head, values=values)
        return self._compare(ctx, head, bus, values)

    def _compare(self, ctx: PreflightContext, head: str, bus: float, values: dict) -> CheckResult:
        from gpufield.errors import InputError
        from gpufield.telemetry.specs import gpu_spec

        st = ctx.nvml_state()
        name = st.gpus[0].name
        if st.health is not None and any(not h.nvlink_up for h in st.health):
            return result(self.name, "pass", head + " (not all GPUs have NVLink up: no catalogue figure for this path)",
                          values=values)
        try:
            spec = gpu_spec(name)
        except InputError:
            return result(self.name, "pass", head + f" ({name} not in the spec catalogue)", values=values)
        if spec.nvlink_bandwidth_bytes_per_s is None:
            return result(self.name, "pass", head + f" (no NVLink figure for {spec.key})", values=values)
        uni = spec.nvlink_bandwidth_bytes_per_s / 2
        frac = bus / uni
        values.update(spec_key=spec.key, spec_nvlink_one_direction_gb_per_s=uni / 1e9, busbw_fraction_of_spec=round(frac, 4))
        if frac < ctx.config.min_busbw_fraction:
            return result(self.name, "warn", head + f" = {frac:.0%} of {spec.key}'s {uni / 1e9:.0f} GB/s NVLink "
                          f"(< {ctx.config.min_busbw_fraction:.0%})", values=values,
                          fix="compare with nccl-tests all_reduce_perf at 1 GiB; check NVLink (gpu.nvlink), "
                          "Fabric Manager and NCCL_P2P_DISABLE")
        return result(self.name, "pass", head + f" = {frac:.0%} of {spec.key}'s one-direction NVLink", values=values)

    @staticmethod
    def _launch(backend: str, world: int, nbytes: int, iters: int, timeout_s: float) -> dict | str:
        """Run the ranks; rank 0's JSON, or a one-line reason for the failure."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_src_root(), env.get("PYTHONPATH", "")) if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        init = f"tcp://127.0.0.1:{_free_port()}"
        deadline = time.monotonic() + timeout_s
        procs = [subprocess.Popen(
            [sys.executable, "-m", "gpufield.harden.preflight._allreduce_worker", "--rank", str(r), "--world", str(world),
             "--backend", backend, "--init", init, "--bytes", str(nbytes), "--iters", str(iters),
             "--timeout-s", str(timeout_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for r in range(world)]
        outs: list[tuple[str, str]] = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            return f"all-reduce did not finish within {timeout_s:g} s ({len(outs)} of {world} ranks done)"
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for r, (p, (_o, err)) in enumerate(zip(procs, outs, strict=True)):
            if p.returncode != 0:
                tail = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
                return f"rank {r} exited with status {p.returncode}: {tail[0][:300]}"
        try:
            return json.loads(outs[0][0].strip().splitlines()[-1])
        except (IndexError, ValueError):
            return "rank 0 printed no result"
