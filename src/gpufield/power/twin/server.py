"""The twin's engine-style ``/metrics`` endpoint over real HTTP on loopback (vLLM V1 names/buckets).

:class:`TwinMetricsServer` renders, for the simulated time :attr:`sim_time_s`, the cumulative vLLM
histograms ``vllm:inter_token_latency_seconds`` and ``vllm:time_to_first_token_seconds`` (bucket
bounds from vLLM's ``loggers.py``, power.md 5.1), the counter ``vllm:generation_tokens_total`` and the
gauges ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``, in Prometheus text format 0.0.4,
so :class:`gpufield.power.engines.PromLaneSource` reads the twin exactly as it reads vLLM.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from gpufield.power.twin.engine import SimResult

__all__ = ["TwinMetricsServer", "render_vllm", "VLLM_ITL_BUCKETS_S", "VLLM_TTFT_BUCKETS_S"]

VLLM_ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                      10.0, 20.0, 40.0, 80.0)
VLLM_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                       10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def _hist(name: str, help_: str, bounds, values, weights, labels: str) -> list[str]:
    v = np.asarray(values, float)
    w = np.asarray(weights, float)
    out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    for b in bounds:
        out.append(f'{name}_bucket{{{labels},le="{b}"}} {float(w[v <= b].sum())}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(w.sum())}')
    out.append(f"{name}_sum{{{labels}}} {float((v * w).sum())}")
    out.append(f"{name}_count{{{labels}}} {float(w.sum())}")
    return out


def render_vllm(r: SimResult, t_s: float, model_name: str = "twin") -> str:
    """Exposition text of the twin's state at simulated time ``t_s`` (cumulative since 0)."""
    labels = f'engine="0",model_name="{model_name}"'
    k = int(np.searchsorted(r.it_end_s, t_s, side="right"))
    done_first = r.first_token_s <= t_s
    running = int(np.sum(done_first & (r.finish_s > t_s)))
    waiting = int(np.sum((r.handoff_s <= t_s) & ~done_first))
    lines = _hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                  VLLM_ITL_BUCKETS_S, r.it_dt_s[:k], r.it_tokens[:k], labels)
    lines += _hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                   VLLM_TTFT_BUCKETS_S, r.ttft_s[done_first], np.ones(int(done_first.sum())), labels)
    lines += ["# HELP vllm:generation_tokens_total Number of generation tokens processed.",
              "# TYPE vllm:generation_tokens_total counter",
              f"vllm:generation_tokens_total{{{labels}}} {float(r.it_tokens[:k].sum())}",
              "# HELP vllm:num_requests_running Number of requests in model execution batches.",
              "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} {running}",
              "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
              "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{labels}}} {waiting}"]
    return "\n".join(lines) + "\n"


class TwinMetricsServer:
    """Serve :func:`render_vllm` of a run on ``http://127.0.0.1:<port>/metrics``.

    Args:
        result: the simulated run. sim_time_s: initial simulated time (set the attribute to move).
    """

    def __init__(self, result: SimResult, sim_time_s: float = 0.0) -> None:
        self.result, self.sim_time_s = result, sim_time_s
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                if self.path.rstrip("/") != "/metrics":
                    self.send_error(404)
                    return
                body = render_vllm(outer.result, outer.sim_time_s).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The ``/metrics`` URL."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/metrics"

    def __enter__(self) -> TwinMetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
