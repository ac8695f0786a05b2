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

**Liveness** (:class:`Heartbeat`). Every supervisor writes ``hb/<node>`` every ``heartbeat_s``
from a thread with its own store connection (JSON: wall time, pid, generation = the launch it is
at, a sequence number); the same thread reads the other nodes' heartbeats. A peer whose heartbeat
has not changed for ``peer_dead_s`` *on this node's clock* (no clock agreement needed; a node that
has never beaten is not judged) is dead: a running launch with it is ended and decided at once
(the dead node is the root, :data:`gpufield.harden.policy.LOST`: excluded within the budget, since
nothing can launch there), and no wait (reports, gates, done, end) waits for it. A decider that
dies before publishing its decision or plan ends the others' parts with a :class:`ConnectionError`
(no takeover). A store that stops answering for ``peer_dead_s`` (node 0's supervisor gone) is a
:class:`ConnectionError` on this node's next step: the local launch is ended and the supervisor
exits naming the store. A node that ends normally writes a last heartbeat marked ``ended``.

**Keys** (under the prefix): ``plan/<a>``, ``inc/<a>/decider``, ``inc/<a>/report/<node>``,
``inc/<a>/decision``, ``policy``, ``budget``, ``gate/<a>/<node>``, ``done/<a>/<node>``, ``end/<node>``,
``hb/<node>``; values are JSON text.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["Cluster", "ClusterConfig", "Heartbeat", "cluster_config", "pick_root"]


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
        heartbeat_s: period of this supervisor's heartbeat in the store, seconds.
        peer_dead_s: a peer whose heartbeat has not changed for this long (this node's clock) is
            dead, and a store that has not answered for this long is lost, seconds (> 2 heartbeats).
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
    heartbeat_s: float = 1.0
    peer_dead_s: float = 6.0

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
        for name in ("connect_timeout_s", "gather_s", "wait_s", "poll_s", "gate_wait_s", "end_wait_s",
                     "heartbeat_s", "peer_dead_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not self.peer_dead_s > 2 * self.heartbeat_s:
            raise ValueError(f"peer_dead_s ({self.peer_dead_s:g}) must exceed two heartbeats "
                             f"(heartbeat_s {self.heartbeat_s:g})")

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
    hardware = f.get("kind") == "lost" or (bool(f.get("host")) and f.get("action_kind") in ("EXCLUDE_NODE", "RESET_GPU")
                                           and float(f.get("confidence") or 0) >= 0.6)
    return (not f.get("user_exception"), not hardware, bool(rep.get("victim")), not rep.get("ranks"),
            rep.get("kind") == "peer", float(rep.get("t") or 0.0), rep["node"])


def pick_root(reports: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The report that explains the incident, among the nodes' reports (those with a ``failure``).

    Order: a rank's exception in user code; a node whose supervisor is gone (``kind`` ``lost``) or
    a hardware verdict of triage naming a host; a rank that
    failed without a communication error of its own (the others' ranks then die of "connection
    closed by peer": victims); a report that names ranks (a stopped rank, ``/proc`` state T or D);
    a node's own detection before one that only followed; the earliest; the node name.

    Returns:
        The root report, or None when no report carries a failure (every node was fine or silent).
    """
    cands = [r for r in reports.values() if r.get("failure")]
    return min(cands, key=_rank_key) if cands else None


def _first_line(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


class Heartbeat:
    """This supervisor's heartbeat in the store and its view of the other supervisors' heartbeats.

    A daemon thread with its own store client (so a main thread blocked in a wait, a triage or a
    gate does not stop it) writes ``hb/<me>`` every ``heartbeat_s`` and reads every peer's
    ``hb/<peer>``. A peer is dead when its heartbeat (pid, sequence) has not changed for
    ``peer_dead_s`` seconds of this node's monotonic clock since it last changed; a peer never seen
    is not judged; a peer whose last heartbeat says ``ended`` is never dead. The store is lost when
    one of the thread's store operations fails (a closed connection at once, an unanswered one after
    the client's timeout, ``peer_dead_s``; torch's store client does not reconnect).

    Args:
        config: the :class:`ClusterConfig`.
        clock: monotonic clock, seconds (tests pass their own).

    Raises:
        ConnectionError: the thread's store client cannot connect within ``peer_dead_s``.
    """

    def __init__(self, config: ClusterConfig, *, clock=time.monotonic) -> None:
        from torch.distributed import PrefixStore, TCPStore

        self.cfg, self.me, self.clock = config, config.node, clock
        try:
            raw = TCPStore(config.store_host, config.store_port, is_master=False, wait_for_workers=False,
                           timeout=timedelta(seconds=config.peer_dead_s))
        except Exception as e:
            raise ConnectionError(f"node {self.me}: heartbeat cannot reach the store at {config.store_host}:"
                                  f"{config.store_port} ({_first_line(e)})") from None
        self._raw = raw
        self.store = PrefixStore(f"gpufield/{config.job_id}/", raw)
        self.generation = 0  # the launch this supervisor is at (the coordinator sets it)
        self._seq = 0
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[tuple, float]] = {}  # peer -> ((pid, seq), monotonic time it last changed)
        self._ended: set[str] = set()
        self._lost: str | None = None
        self._stop = threading.Event()
        self._beat(ended=False)
        self._thread = threading.Thread(target=self._loop, name=f"gpufield-heartbeat-{self.me}", daemon=True)
        self._thread.start()

    def _beat(self, *, ended: bool) -> None:
        self._seq += 1
        self.store.set(f"hb/{self.me}", json.dumps({"t": time.time(), "pid": os.getpid(), "gen": self.generation,
                                                    "seq": self._seq, "ended": ended}))

    def _look(self) -> None:
        now = self.clock()
        peers = [n for n in self.cfg.nodes if n != self.me and n not in self._ended]
        keys = [f"hb/{n}" for n in peers]
        # a heartbeat key, once written, stays: only the ones not seen yet need a check round trip each;
        # the others are read in one multi_get (steady state: one set and one multi_get per beat)
        present = [k for n, k in zip(peers, keys, strict=True) if n in self._seen or self.store.check([k])]
        vals = dict(zip(present, self.store.multi_get(present), strict=True)) if present else {}
        with self._lock:
            for n, k in zip(peers, keys, strict=True):
                if k not in vals:
                    continue
                hb = json.loads(vals[k].decode())
                if hb.get("ended"):
                    self._ended.add(n)
                    self._seen.pop(n, None)
                    continue
                ident = (hb.get("pid"), hb.get("seq"))
                old = self._seen.get(n)
                if old is None or old[0] != ident:
                    self._seen[n] = (ident, now)

    def _loop(self) -> None:
        while not self._stop.wait(self.cfg.heartbeat_s):
            try:
                self._beat(ended=False)
                self._look()
            except RuntimeError as e:  # torch's DistNetworkError / DistStoreError: the client does not reconnect
                c = self.cfg
                self._lost = (f"node {self.me}: lost the store at {c.store_host}:{c.store_port} (node 0's supervisor "
                              f"gone?): {_first_line(e)}")
                return
            except ValueError:  # a peer's heartbeat that is not JSON: that peer is judged on its next one
                continue

    def lost(self) -> str | None:
        """Why the store counts as lost, or None while it answers."""
        return self._lost

    def dead(self, nodes=None) -> dict[str, float]:
        """Peers (of ``nodes``, default all) whose heartbeat is older than ``peer_dead_s``: node -> seconds
        since it last changed (this node's clock)."""
        now = self.clock()
        with self._lock:
            return {n: round(now - t, 2) for n, (_, t) in self._seen.items()
                    if (nodes is None or n in nodes) and now - t > self.cfg.peer_dead_s}

    def close(self) -> None:
        """Stop the thread and write a last heartbeat marked ``ended`` (peers then never judge this node dead)."""
        self._stop.set()
        self._thread.join(timeout=self.cfg.heartbeat_s + self.cfg.peer_dead_s)
        try:
            if self._lost is None:
                self._beat(ended=True)
        except Exception:  # the store may be gone already: nothing to tell
            pass
        self.store = self._raw = None


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
        # every wait below is polled, so a store operation blocks only when the store stops answering
        self._raw.set_timeout(timedelta(seconds=c.peer_dead_s))
        self.store = PrefixStore(f"gpufield/{c.job_id}/", self._raw)
        self.store.set(f"node/{self.me}", "up")
        self.heartbeat = Heartbeat(c)

    # -- small helpers ------------------------------------------------------------------------------
    def _lost(self, e: Exception) -> ConnectionError:
        c = self.cfg
        return ConnectionError(f"node {self.me}: lost the store at {c.store_host}:{c.store_port} "
                               f"(node 0's supervisor gone?): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def check_store(self) -> None:
        """Raise when the heartbeat thread found the store lost.

        Raises:
            ConnectionError: no answer from the store for ``peer_dead_s``.
        """
        why = self.heartbeat.lost() if self.heartbeat is not None else None
        if why:
            raise ConnectionError(why)

    def dead(self, nodes=None) -> dict[str, float]:
        """Peers (of ``nodes``) whose supervisor is gone: node -> seconds since its heartbeat last changed."""
        self.check_store()
        return self.heartbeat.dead(nodes) if self.heartbeat is not None else {}

    def _has(self, key: str) -> bool:
        self.check_store()
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

    def _wait_keys(self, keys: list[str], timeout_s: float, owners: list[str] | None = None) -> list[str]:
        """The keys of ``keys`` present within ``timeout_s`` (polled: a missing node must not block forever).
        With ``owners`` (the node that writes each key), a key whose node is dead is not waited for."""
        deadline = time.monotonic() + timeout_s
        while True:
            present = [k for k in keys if self._has(k)]
            if len(present) == len(keys) or time.monotonic() >= deadline:
                return present
            if owners is not None:
                dead = self.dead(owners)
                if all(k in present or o in dead for k, o in zip(keys, owners, strict=True)):
                    return present
            time.sleep(0.1)

    def _wait_from(self, key: str, owner: str | None, timeout_s: float, what: str) -> bool:
        """Wait for ``key``, written by ``owner``; ConnectionError when that node's supervisor is gone."""
        deadline = time.monotonic() + timeout_s
        while not self._has(key):
            if owner is not None and owner != self.me:
                dead = self.dead([owner])
                if owner in dead:
                    raise ConnectionError(f"node {self.me}: node {owner}'s supervisor is gone (no heartbeat for "
                                          f"{dead[owner]:g} s) before it published {what}; ending this node's part")
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    # -- the protocol ------------------------------------------------------------------------------
    def plan(self, attempt: int) -> tuple[list[str], list[str]]:
        """``(hosts, excluded)`` of launch ``attempt`` (node 0 writes launch 0's: every node, none excluded)."""
        key = f"plan/{attempt}"
        if attempt == 0 and self.host and not self._has(key):
            self._set(key, {"hosts": list(self.cfg.nodes), "excluded": []})
        owner = self.cfg.nodes[0] if attempt == 0 else self.decider(attempt - 1)
        if not self._wait_from(key, owner, self.cfg.wait_s, f"the plan of launch {attempt}"):
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
        present = set(self._wait_keys(keys, self.cfg.gather_s, owners=list(hosts)))
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
            ConnectionError: the deciding node's supervisor is gone, or the store.
        """
        key = f"inc/{attempt}/decision"
        if not self._wait_from(key, self.decider(attempt), self.cfg.wait_s, f"the decision of launch {attempt}"):
            raise TimeoutError(f"node {self.me}: no decision for launch {attempt} within {self.cfg.wait_s:g} s")
        return self._get(key)

    def post_gate(self, attempt: int, passed: bool) -> None:
        """Post this excluded node's validation result before launch ``attempt``."""
        self._set(f"gate/{attempt}/{self.me}", bool(passed))

    def gates(self, attempt: int, nodes: list[str]) -> dict[str, bool]:
        """Validation results of ``nodes`` before launch ``attempt`` (a node silent past ``gate_wait_s`` fails)."""
        keys = [f"gate/{attempt}/{n}" for n in nodes]
        present = set(self._wait_keys(keys, self.cfg.gate_wait_s, owners=list(nodes)))
        return {n: (bool(self._get(k)) if k in present else False) for n, k in zip(nodes, keys, strict=True)}

    def done(self, attempt: int) -> None:
        """Record that this node's launch ``attempt`` exited 0."""
        self._set(f"done/{attempt}/{self.me}", True)

    def outcome(self, attempt: int, hosts: list[str]) -> str:
        """Wait until every host of launch ``attempt`` is done (``"ok"``) or an incident is recorded
        (``"incident"``); ``"timeout"`` after ``wait_s``. A host whose supervisor is gone is not
        waited for while another host is done (``"ok"``: the job's ranks ended 0 on the live nodes);
        when none is done and every host not done is gone: ``"lost"``."""
        deadline = time.monotonic() + self.cfg.wait_s
        keys = [f"done/{attempt}/{h}" for h in hosts]
        while time.monotonic() < deadline:
            if self.incident(attempt):
                return "incident"
            done = [self._has(k) for k in keys]
            if all(done):
                return "ok"
            dead = self.dead(hosts)
            if all(d or h in dead for d, h in zip(done, hosts, strict=True)):
                return "ok" if any(done) else "lost"
            time.sleep(0.1)
        return "timeout"

    def close(self) -> None:
        """Record this node's end; node 0 keeps the store up until every node has ended (or ``end_wait_s``)."""
        try:
            self._set(f"end/{self.me}", True)
            if self.host:  # the heartbeat still watches: a node that is gone is not waited for
                self._wait_keys([f"end/{n}" for n in self.cfg.nodes], self.cfg.end_wait_s, owners=list(self.cfg.nodes))
            if self.heartbeat is not None:
                self.heartbeat.close()
        finally:
            self.heartbeat = None
            self.store = self._raw = None  # the server thread stops with the last reference
