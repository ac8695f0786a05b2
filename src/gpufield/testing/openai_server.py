"""A small OpenAI-compatible streaming server with vLLM-format ``/metrics``, for tests and CPU dry runs.

Run as a process: ``python -m gpufield.testing.openai_server --ttft-s 0.05 --itl-s 0.02``; it prints
one JSON line ``{"port": N, "pid": P}`` on stdout when it listens, then serves until SIGTERM.

Endpoints (stdlib :mod:`http.server`, one thread per request):

* ``GET /v1/models``: one model, ``--model`` (default ``tiny-bigram``).
* ``POST /v1/completions`` and ``POST /v1/chat/completions`` with ``"stream": true``: server-sent
  events in the OpenAI format (``data: {...}`` lines, ``data: [DONE]``), one token per event. The
  tokens are *computed*: a seeded 64-word bigram model (numpy ``float64`` logits, argmax) run on the
  prompt's words, ``max_tokens`` steps. Timing is a known schedule on the server's own monotonic
  clock: the first token leaves at ``t_received + ttft_s``, token ``k`` at ``t_first + k * itl_s``
  (the server sleeps until each deadline; computing a token takes microseconds), so the delays are
  exact up to the scheduler's wake-up latency. ``stream: false`` returns the whole text at the end.
* ``GET /metrics``: ``prometheus-client`` text with the families a vLLM V1 engine exposes, with
  vLLM's bucket layouts (``vllm/v1/metrics/loggers.py``): ``vllm:time_to_first_token_seconds``,
  ``vllm:inter_token_latency_seconds``, ``vllm:e2e_request_latency_seconds`` (histograms, labels
  ``model_name`` and ``engine="0"``), ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and
  ``vllm:kv_cache_usage_perc`` (gauges). The histograms observe the server's own measured delays
  (emission timestamps), not the configured ones.
* ``GET /debug/requests``: JSON list of every finished request's emission timestamps (monotonic s):
  ``{"received": t0, "emitted": [t1, ...]}`` (an independent record for tests).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

__all__ = ["TinyBigram", "serve", "TTFT_BUCKETS_S", "ITL_BUCKETS_S", "E2E_BUCKETS_S"]

#: vLLM V1 bucket layouts (vllm/v1/metrics/loggers.py)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                 480.0, 960.0, 1920.0, 7680.0)


class TinyBigram:
    """A seeded bigram language model over a 64-word vocabulary (numpy float64).

    ``next(tok) = argmax(E[tok] @ W + b)``, with ``E`` (64 x 16), ``W`` (16 x 64) and ``b`` drawn from
    ``numpy.random.default_rng(seed)``; unknown prompt words map to token 0.
    """

    VOCAB = tuple(f"w{i}" for i in range(64))

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.e = rng.standard_normal((64, 16))
        self.w = rng.standard_normal((16, 64))
        self.b = rng.standard_normal(64)
        self._index = {w: i for i, w in enumerate(self.VOCAB)}

    def start(self, prompt: str) -> int:
        """The token the prompt ends with (0 when its last word is not in the vocabulary)."""
        words = prompt.split()
        return self._index.get(words[-1], 0) if words else 0

    def step(self, tok: int) -> int:
        """One decode step: the most likely next token after ``tok``."""
        return int(np.argmax(self.e[tok] @ self.w + self.b))


class _State:
    def __init__(self, args: argparse.Namespace) -> None:
        from prometheus_client import CollectorRegistry, Gauge, Histogram

        self.args = args
        self.model = TinyBigram(args.seed)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.running = 0
        r = self.registry = CollectorRegistry()
        lab = ["model_name", "engine"]
        lv = (args.model, "0")
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              lab, buckets=TTFT_BUCKETS_S, registry=r).labels(*lv)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             lab, buckets=ITL_BUCKETS_S, registry=r).labels(*lv)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             lab, buckets=E2E_BUCKETS_S, registry=r).labels(*lv)
        self.g_running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                               lab, registry=r).labels(*lv)
        self.g_waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                               lab, registry=r).labels(*lv)
        self.g_kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                          lab, registry=r).labels(*lv)
        self.g_waiting.set(0)
        self.g_kv.set(0)


def _handler(st: _State) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server name)
            if self.path == "/metrics":
                from prometheus_client import generate_latest

                self._send(200, generate_latest(st.registry), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": st.args.model, "object": "model",
                                                                        "owned_by": "gpufield"}]}).encode(),
                           "application/json")
            elif self.path == "/debug/requests":
                with st.lock:
                    body = json.dumps(st.requests).encode()
                self._send(200, body, "application/json")
            else:
                self._send(404, b'{"error": "not found"}', "application/json")

        def do_POST(self) -> None:  # noqa: N802
            t0 = time.monotonic()
            chat = self.path == "/v1/chat/completions"
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404, b'{"error": "not found"}', "application/json")
                return
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                prompt = (" ".join(m.get("content", "") for m in req["messages"]) if chat else req["prompt"])
                n = int(req.get("max_tokens", 16))
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, json.dumps({"error": f"bad request: {e}"}).encode(), "application/json")
                return
            with st.lock:
                st.running += 1
                st.g_running.set(st.running)
            try:
                self._generate(t0, chat, prompt, n, bool(req.get("stream", False)))
            finally:
                with st.lock:
                    st.running -= 1
                    st.g_running.set(st.running)

        def _generate(self, t0: float, chat: bool, prompt: str, n: int, stream: bool) -> None:
            a = st.args
            tok = st.model.start(prompt)
            emitted: list[float] = []
            words: list[str] = []
            obj = "chat.completion.chunk" if chat else "text_completion"
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
            for k in range(n):
                tok = st.model.step(tok)
                word = TinyBigram.VOCAB[tok] + " "
                deadline = t0 + a.ttft_s + k * a.itl_s
                delay = deadline - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if stream:
                    choice = ({"index": 0, "delta": {"content": word}, "finish_reason": None} if chat
                              else {"index": 0, "text": word, "finish_reason": None})
                    ev = {"id": "cmpl-0", "object": obj, "model": a.model, "choices": [choice]}
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()
                t = time.monotonic()
                if emitted:
                    st.itl.observe(t - emitted[-1])
                else:
                    st.ttft.observe(t - t0)
                emitted.append(t)
                words.append(word)
            st.e2e.observe(time.monotonic() - t0)
            if stream:
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            else:
                text = "".join(words)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
                self._send(200, json.dumps({"id": "cmpl-0", "object": "chat.completion" if chat else "text_completion",
                                            "model": a.model, "choices": [choice],
                                            "usage": {"completion_tokens": n}}).encode(), "application/json")
            with st.lock:
                st.requests.append({"received": t0, "emitted": emitted})

    return H


def serve(argv: list[str] | None = None) -> None:
    """Parse ``argv``, listen, print ``{"port", "pid"}`` as one JSON line, serve until SIGTERM/SIGINT."""
    p = argparse.ArgumentParser(prog="python -m gpufield.testing.openai_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-s", type=float, default=0.05, help="delay from request to first token (s)")
    p.add_argument("--itl-s", type=float, default=0.02, help="delay between tokens (s)")
    p.add_argument("--model", default="tiny-bigram")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not (a.ttft_s >= 0 and a.itl_s >= 0):
        p.error("--ttft-s and --itl-s must be >= 0")
    st = _State(a)
    srv = ThreadingHTTPServer((a.host, a.port), _handler(st))
    srv.daemon_threads = True

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(json.dumps({"port": srv.server_port, "pid": __import__("os").getpid()}), flush=True)
    try:
        srv.serve_forever(poll_interval=0.05)
    finally:
        srv.server_close()


if __name__ == "__main__":
    serve(sys.argv[1:])
