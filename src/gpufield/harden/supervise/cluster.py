"""One ``gpufield run`` per node, agreeing through a torch.distributed ``TCPStore`` (issue 25, multi-node).

Each node runs its own supervisor around its own ``torchrun`` (``srun --ntasks-per-node=1 gpufield
run --cluster -- torchrun --nnodes {nnodes} ...``). The supervisors are not a cluster manager: they
share one key-value store, the same kind torchrun's c10d rendezvous already uses, and agree on three
things through it:

- **one restart budget** for the whole job: a counter incremented with the store's atomic ``add``
  (:attr:`gpufield.harden.policy.RetryPolicy.budget`); a restart is granted only when the total
  after the increment is within ``max_retries``, so two nodes failing together cannot overspend it;
- **one decision per incident**: the first node to record an incident of launch ``a`` wins the
  ``compare_set`` of ``inc/<a>/decider`` and decides; every other node, seeing the key on its next
  poll, ends its local launch, posts what it saw (its detection, its local triage verdict, the state
  of its rank processes) and waits. The decider waits up to ``gather_s`` for those reports, picks the
  root (:func:`pick_root`), applies the retry policy whose state it reads from the store (so whichever
  node decides next continues the same counters), and publishes the decision: restart all, exclude a
  node, or stop;
- **one exclude list and one host list per launch**: after a decision every excluded node runs its
  own validation gate (``--validate-cmd``, default: none, so it stays out) and posts the result; the
  decider then publishes ``plan/<a+1>`` (hosts, excluded), and every node launches (or, excluded,
  sits out and waits) from that plan. Each node writes the same exclude file and hostfile from it.

**The store.** Node 0 hosts a ``TCPStore`` at ``store_host:store_port`` for the life of the job; the
others connect to it. By default that is the job's own c10d rendezvous endpoint (``--rdzv-backend
c10d --rdzv-endpoint H:P``): torchrun's agent on node 0 then finds the port taken and joins the
store as a client (torch's c10d backend falls back to a client when it cannot host), so the job
keeps one store, which outlives torchrun's restarts. Every launch gets its own ``--rdzv-id``
(``<id>-a<n>``): a rendezvous that an agent closed stays closed in the store. The supervisor's keys
live under ``gpufield/<job_id>/``. Node 0 keeps the store up until every node has finished (or
``end_wait_s``).

**Keys** (under the prefix): ``plan/<a>``, ``inc/<a>/decider``, ``inc/<a>/report/<node>``,
``inc/<a>/decision``, ``policy``, ``budget``, ``gate/<a>/<node>``, ``done/<a>/<node>``, ``end/<node>``;
values are JSON text.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["Cluster", "ClusterConfig", "cluster_config", "pick_root"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterConfig:
    """Where this node stands in the job and how long it waits for the others.

    Attributes:
        nodes: every node of the job, in node-rank order (host names as the scheduler names them).
        node_rank: this node's index in ``nodes`` (Slurm: ``SLURM_NODEID``); node 0 hosts the store.
        store_host / store_port: the store's address.
        job_id: key prefix (Slurm: ``SLURM_JOB_ID``).
        connect_timeout_s: how long a node waits for the store to come up, seconds.
        gather_s: how long the deciding node waits for the other nodes' reports, seconds.
        wait_s: how long a node waits for a decision, a plan or the other nodes' end, seconds.
        poll_s: how often a running node looks for another node's incident, seconds.
        gate_wait_s: how long the decider waits for an excluded node's validation result, seconds.
        end_wait_s: how long node 0 keeps the store up for the others at the end, seconds.
    """

    nodes: tuple[str, ...]
    node_rank: int
    store_host: str
    store_port: int
    job_id: str = "job"
    connect_timeout_s: float = 300.0
    gather_s: float = 60.0
    wait_s: float = 3600.0
    poll_s: float = 0.5
    gate_wait_s: float = 400.0
    end_wait_s: float = 60.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if len(self.nodes) < 1 or len(set(self.nodes)) != len(self.nodes) or not all(self.nodes):
            raise ValueError(f"nodes must be distinct non-empty names, got {list(self.nodes)}")
        if not 0 <= self.node_rank < len(self.nodes):
            raise ValueError(f"node_rank {self.node_rank} is outside the {len(self.nodes)} node(s)")
        if not 0 < self.store_port < 65536:
            raise ValueError(f"store_port {self.store_port} is not a TCP port")
        if not self.store_host or not self.job_id or "/" in self.job_id:
            raise ValueError("store_host and job_id (without '/') must be given")
        for name in ("connect_timeout_s", "gather_s", "wait_s", "poll_s", "gate_wait_s", "end_wait_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")

    @property
    def node(self) -> str:
        """This node's name."""
        return self.nodes[self.node_rank]


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``.

    Raises:
        ValueError: no port, or a port that is not a number in 1..65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"store endpoint {text!r}: expected HOST:PORT with a port in 1..65535")
    return host.strip("[]"), int(port)


def cluster_config(command: tuple[str, ...] | list[str], *, store: str | None = None, node_rank: int | None = None,
                   nodes: tuple[str, ...] = (), job_id: str | None = None, env: dict[str, str] | None = None,
                   **timeouts: float) -> ClusterConfig:
    """The :class:`ClusterConfig` of this node from the options, else Slurm's environment, else the command.

    Args:
        command: the job command (its c10d ``--rdzv-endpoint`` is the default store, its ``--rdzv-id``
            the default job id).
        store: ``HOST:PORT`` of the store, or None.
        node_rank: this node's index, or None (``SLURM_NODEID``).
        nodes: the job's nodes, or empty (``SLURM_JOB_NODELIST`` expanded).
        job_id: key prefix, or None (``SLURM_JOB_ID``, else the rendezvous id, else ``job``).
        env: the environment to read (default: this process's).
        **timeouts: :class:`ClusterConfig` timeout fields.

    Raises:
        ValueError: a missing piece (node list, node rank, store), named with what to give instead.
    """
    from gpufield.harden.supervise.launch import option_value, rdzv_endpoint
    from gpufield.harden.supervise.slurm import slurm_job

    job = slurm_job(env)
    if not nodes:
        if job is None:
            raise ValueError("--cluster needs the job's node list: run it under Slurm (SLURM_JOB_NODELIST) "
                             "or give --nodes host1,host2,...")
        nodes = job.nodes
    if node_rank is None:
        if job is None or job.node_id is None:
            raise ValueError("--cluster needs this node's index: run it as a Slurm task (SLURM_NODEID) or give --node-rank")
        node_rank = job.node_id
    if store is not None:
        host, port = parse_endpoint(store)
    else:
        ep = rdzv_endpoint(list(command))
        if ep is None:
            raise ValueError("--cluster needs a store: give --store HOST:PORT, or launch torchrun with "
                             "--rdzv-backend c10d --rdzv-endpoint HOST:PORT (its store is shared)")
        host, port = ep
    jid = job_id or (job.job_id if job else None) or option_value(list(command), "--rdzv-id", "--rdzv_id") or "job"
    return ClusterConfig(nodes=tuple(nodes), node_rank=node_rank, store_host=host, store_port=port,
                         job_id=jid.replace("/", "_"), **timeouts)


def _rank_key(rep: dict[str, Any]) -> tuple:
    f = rep["failure"]
    hardware = bool(f.get("host")) and f.get("action_kind") in ("EXCLUDE_NODE", "RESET_GPU") and \
        float(f.get("confidence") or 0) >= 0.6
    return (not f.get("user_exception"), not hardware, bool(rep.get("victim")), not rep.get("ranks"),
            rep.get("kind") == "peer", float(rep.get("t") or 0.0), rep["node"])


def pick_root(reports: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The report that explains the incident, among the nodes' reports (those with a ``failure``).

    Order: a rank's exception in user code; a hardware verdict of triage naming a host; a rank that
    failed without a communication error of its own (the others' ranks then die of "connection
    closed by peer": victims); a report that names ranks (a stopped rank, ``/proc`` state T or D);
    a node's own detection before one that only followed; the earliest; the node name.

    Returns:
        The root report, or None when no report carries a failure (every node was fine or silent).
    """
    cands = [r for r in reports.values() if r.get("failure")]
    return min(cands, key=_rank_key) if cands else None


class Cluster:
    """This node's connection to the job's store (node 0 hosts it).

    Args:
        config: the :class:`ClusterConfig`.

    Raises:
        ConnectionError: the store cannot be hosted (port taken by something else) or reached in time.
    """

    def __init__(self, config: ClusterConfig) -> None:
        from torch.distributed import PrefixStore, TCPStore

        self.cfg = c = config
        self.me = c.node
        self.host = c.node_rank == 0
        try:
            self._raw = TCPStore(c.store_host, c.store_port, is_master=self.host, wait_for_workers=False,
                                 timeout=timedelta(seconds=c.connect_timeout_s), multi_tenant=True)
        except Exception as e:  # DistNetworkError / RuntimeError / TimeoutError, by torch version
            what = "host" if self.host else "reach"
            raise ConnectionError(f"node {self.me}: cannot {what} the store at {c.store_host}:{c.store_port} "
                                  f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        self._raw.set_timeout(timedelta(seconds=c.wait_s))
        self.store = PrefixStore(f"gpufield/{c.job_id}/", self._raw)
        self.store.set(f"node/{self.me}", "up")

    # -- small helpers ------------------------------------------------------------------------------
    def _lost(self, e: Exception) -> ConnectionError:
        c = self.cfg
        return ConnectionError(f"node {self.me}: lost the store at {c.store_host}:{c.store_port} "
                               f"(node 0's supervisor gone?): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def _has(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except RuntimeError as e:  # torch's DistNetworkError / DistStoreError are RuntimeErrors
            raise self._lost(e) from None

    def _get(self, key: str) -> Any:
        try:
            return json.loads(self.store.get(key).decode())
        except RuntimeError as e:
            raise self._lost(e) from None

    def _set(self, key: str, value: Any) -> None:
        try:
            self.store.set(key, json.dumps(value, default=str))
        except RuntimeError as e:
            raise self._lost(e) from None

    def _wait_keys(self, keys: list[str], timeout_s: float) -> list[str]:
        """The keys of ``keys`` present within ``timeout_s`` (polled: a missing node must not block forever)."""
        deadline = time.monotonic() + timeout_s
        while True:
            present = [k for k in keys if self._has(k)]
            if len(present) == len(keys) or time.monotonic() >= deadline:
                return present
            time.sleep(0.1)

    # -- the protocol ------------------------------------------------------------------------------
    def plan(self, attempt: int) -> tuple[list[str], list[str]]:
        """``(hosts, excluded)`` of launch ``attempt`` (node 0 writes launch 0's: every node, none excluded)."""
        key = f"plan/{attempt}"
        if attempt == 0 and self.host and not self._has(key):
            self._set(key, {"hosts": list(self.cfg.nodes), "excluded": []})
        if not self._wait_keys([key], self.cfg.wait_s):
            raise TimeoutError(f"node {self.me}: no plan for launch {attempt} within {self.cfg.wait_s:g} s")
        p = self._get(key)
        return list(p["hosts"]), list(p["excluded"])

    def post_plan(self, attempt: int, hosts: list[str], excluded: list[str]) -> None:
        """Publish launch ``attempt``'s host list and exclude list (the decider does)."""
        self._set(f"plan/{attempt}", {"hosts": hosts, "excluded": excluded})

    def incident(self, attempt: int) -> bool:
        """Whether some node has recorded an incident of launch ``attempt`` (one store round trip)."""
        return self._has(f"inc/{attempt}/decider")

    def claim(self, attempt: int) -> bool:
        """Record an incident of launch ``attempt``; True when this node is the first (it decides)."""
        try:
            won = self.store.compare_set(f"inc/{attempt}/decider", "", self.me)
        except RuntimeError as e:
            raise self._lost(e) from None
        return won.decode() == self.me

    def decider(self, attempt: int) -> str | None:
        """The node deciding launch ``attempt``'s incident, or None."""
        key = f"inc/{attempt}/decider"
        return self._get_text(key) if self._has(key) else None

    def _get_text(self, key: str) -> str:
        try:
            return self.store.get(key).decode()
        except RuntimeError as e:
            raise self._lost(e) from None

    def report(self, attempt: int, rep: dict[str, Any]) -> None:
        """Post this node's report of launch ``attempt``'s incident."""
        self._set(f"inc/{attempt}/report/{self.me}", {**rep, "node": self.me})

    def gather(self, attempt: int, hosts: list[str]) -> dict[str, dict[str, Any]]:
        """The reports of ``hosts`` for launch ``attempt``: all of them, or those in within ``gather_s``."""
        keys = [f"inc/{attempt}/report/{h}" for h in hosts]
        present = set(self._wait_keys(keys, self.cfg.gather_s))
        return {h: self._get(k) for h, k in zip(hosts, keys, strict=True) if k in present}

    def budget(self, delta: int) -> int:
        """Add ``delta`` to the job's restart counter atomically; the new total.

        Raises:
            ConnectionError: the store is gone.
        """
        try:
            return int(self.store.add("budget", delta))
        except RuntimeError as e:
            raise self._lost(e) from None

    def policy_state(self) -> dict[str, Any]:
        """The retry policy's state as the last decider left it (empty before the first decision)."""
        return self._get("policy") if self._has("policy") else {}

    def save_policy_state(self, state: dict[str, Any]) -> None:
        """Store the retry policy's state for the next decider."""
        self._set("policy", state)

    def publish(self, attempt: int, decision: dict[str, Any]) -> None:
        """Publish the decision of launch ``attempt``'s incident."""
        self._set(f"inc/{attempt}/decision", decision)

    def decision(self, attempt: int) -> dict[str, Any]:
        """Wait for the decision of launch ``attempt``'s incident.

        Raises:
            TimeoutError: none within ``wait_s``.
        """
        key = f"inc/{attempt}/decision"
        if not self._wait_keys([key], self.cfg.wait_s):
            raise TimeoutError(f"node {self.me}: no decision for launch {attempt} within {self.cfg.wait_s:g} s")
        return self._get(key)

    def post_gate(self, attempt: int, passed: bool) -> None:
        """Post this excluded node's validation result before launch ``attempt``."""
        self._set(f"gate/{attempt}/{self.me}", bool(passed))

    def gates(self, attempt: int, nodes: list[str]) -> dict[str, bool]:
        """Validation results of ``nodes`` before launch ``attempt`` (a node silent past ``gate_wait_s`` fails)."""
        keys = [f"gate/{attempt}/{n}" for n in nodes]
        present = set(self._wait_keys(keys, self.cfg.gate_wait_s))
        return {n: (bool(self._get(k)) if k in present else False) for n, k in zip(nodes, keys, strict=True)}

    def done(self, attempt: int) -> None:
        """Record that this node's launch ``attempt`` exited 0."""
        self._set(f"done/{attempt}/{self.me}", True)

    def outcome(self, attempt: int, hosts: list[str]) -> str:
        """Wait until every host of launch ``attempt`` is done (``"ok"``) or an incident is recorded
        (``"incident"``); ``"timeout"`` after ``wait_s``."""
        deadline = time.monotonic() + self.cfg.wait_s
        keys = [f"done/{attempt}/{h}" for h in hosts]
        while time.monotonic() < deadline:
            if self.incident(attempt):
                return "incident"
            if all(self._has(k) for k in keys):
                return "ok"
            time.sleep(0.1)
        return "timeout"

    def close(self) -> None:
        """Record this node's end; node 0 keeps the store up until every node has ended (or ``end_wait_s``)."""
        try:
            self._set(f"end/{self.me}", True)
            if self.host:
                self._wait_keys([f"end/{n}" for n in self.cfg.nodes], self.cfg.end_wait_s)
        finally:
            self.store = self._raw = None  # the server thread stops with the last reference
