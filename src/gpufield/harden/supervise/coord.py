"""Who decides after a failure: this supervisor alone (:class:`LocalCoordinator`) or one of the job's
per-node supervisors through the store (:class:`StoreCoordinator`, :mod:`...supervise.cluster`).

Both give :func:`gpufield.harden.supervise.supervise` the same five steps: ``plan`` (hosts and
exclusions of the next launch), ``peer_check`` (a callable a running launch polls: has another node
recorded an incident, or is another node's supervisor gone?), ``finished`` (a launch exited 0: is the whole job done?), ``resolve`` (this
node's report of a failure -> the decision) and ``after`` (apply a restart decision: exclusions and
the validation gate).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from gpufield.harden.policy import EXCLUDE, LOST, RETRY, Decision, Failure, RetryPolicy
from gpufield.harden.supervise.export import EventLog


class LocalCoordinator:
    """One supervisor for the whole job (its hosts are names for the exclude list and ``{hosts}``).

    Args:
        nodes: the job's hosts.
        policy: the retry policy (it counts the budget itself).
        log: the event log.
        validate_node: the gate an excluded host must pass to return, or None (it stays out).
    """

    me: str | None = None

    def __init__(self, nodes: list[str], policy: RetryPolicy, log: EventLog,
                 validate_node: Callable[[str], bool] | None) -> None:
        self.nodes, self.policy, self.log, self.validate_node = nodes, policy, log, validate_node
        self.excluded: list[str] = []

    def plan(self, attempt: int) -> tuple[list[str], list[str]]:
        """Hosts and exclusions of launch ``attempt``; an excluded host returns when the gate passes."""
        for h in list(self.excluded):
            if self.validate_node is not None and self.validate_node(h):
                self.excluded.remove(h)
                self.log.emit("nodes", returned=h, reason="validation gate passed")
        return [h for h in self.nodes if h not in self.excluded], list(self.excluded)

    def peer_check(self, attempt: int, hosts: list[str] | None = None) -> Callable[[], str | None] | None:
        """None: no other supervisor can end this launch."""
        return None

    def finished(self, attempt: int, hosts: list[str]) -> bool:
        """True: the launch's exit 0 is the job's."""
        return True

    def resolve(self, attempt: int, hosts: list[str], report: dict[str, Any]) -> Decision:
        """The policy's decision on this supervisor's failure report."""
        return self.policy.decide(Failure(**report["failure"]))

    def after(self, attempt: int, decision: Decision) -> None:
        """Exclude the decision's host for the next launches."""
        if decision.action == EXCLUDE and decision.host and decision.host not in self.excluded:
            self.excluded.append(decision.host)

    def close(self) -> None:
        """Nothing to release."""


class StoreCoordinator:
    """One supervisor per node; decisions, the budget and the exclude list agreed through the store.

    Args:
        cluster: the connected :class:`~gpufield.harden.supervise.cluster.Cluster`.
        policy: the retry policy; its ``budget`` is set to the store's atomic counter.
        log: the event log.
        validate_node: this node's gate when it is excluded, or None (it stays out).
    """

    def __init__(self, cluster, policy: RetryPolicy, log: EventLog,
                 validate_node: Callable[[str], bool] | None) -> None:
        self.cl, self.policy, self.log, self.validate_node = cluster, policy, log, validate_node
        policy.budget = cluster.budget
        self.me: str = cluster.me
        self.nodes = list(cluster.cfg.nodes)
        self.excluded: list[str] = []
        self.deciding = False

    def plan(self, attempt: int) -> tuple[list[str], list[str]]:
        """The plan of launch ``attempt`` as the store holds it (waits for it)."""
        hosts, self.excluded = self.cl.plan(attempt)
        if self.cl.heartbeat is not None:
            self.cl.heartbeat.generation = attempt
        return hosts, list(self.excluded)

    def peer_check(self, attempt: int, hosts: list[str] | None = None) -> Callable[[], str | None]:
        """A callable: why launch ``attempt`` must end for another node (an incident recorded, or the
        supervisor of one of ``hosts`` gone), or None.

        Raises (from the callable):
            ConnectionError: the store is lost.
        """
        peers = [h for h in (hosts if hosts is not None else self.nodes) if h != self.me]

        def check() -> str | None:
            if self.cl.incident(attempt):
                return "another node recorded an incident of this launch"
            dead = self.cl.dead(peers)
            if dead:
                return "; ".join(f"node {n}'s supervisor is gone (no heartbeat for {s:g} s)" for n, s in sorted(dead.items()))
            return None

        return check

    def finished(self, attempt: int, hosts: list[str]) -> bool:
        """After this node's exit 0: wait for the others. False when another node's incident needs a decision."""
        self.cl.done(attempt)
        out = self.cl.outcome(attempt, hosts)
        if out == "timeout":
            self.log.emit("cluster", attempt=attempt, note=f"no word from every node within {self.cl.cfg.wait_s:g} s; "
                          "this node's part ended with status 0")
        if out != "incident":
            return True
        self.cl.report(attempt, {"kind": "ok", "t": None, "ranks": [], "failure": None})
        return False

    def sit_out(self, attempt: int, hosts: list[str]) -> bool:
        """This node is excluded from launch ``attempt``: wait for its end; True when the job succeeded.

        Raises:
            ConnectionError: the supervisor of every node of the launch is gone.
        """
        out = self.cl.outcome(attempt, hosts)
        if out == "lost":
            raise ConnectionError(f"node {self.me}: the supervisor of every node of launch {attempt} ({', '.join(hosts)}) "
                                  "is gone; nothing left to wait for")
        return out != "incident"

    def resolve(self, attempt: int, hosts: list[str], report: dict[str, Any]) -> Decision:
        """Record this node's failure; decide when first, else follow the node that decides."""
        self.deciding = self.cl.claim(attempt)
        self.cl.report(attempt, report)
        self.log.emit("cluster", attempt=attempt, role="decide" if self.deciding else "follow",
                      decider=self.cl.decider(attempt), node=self.me)
        return self._decide(attempt, hosts) if self.deciding else self.follow(attempt)

    def follow(self, attempt: int) -> Decision:
        """The published decision of launch ``attempt``'s incident (waits for it)."""
        d = self.cl.decision(attempt)
        self.excluded = list(d["excluded"])
        self.log.emit("cluster", attempt=attempt, followed=d["decider"], root=d.get("root"))
        return Decision(**d["decision"])

    def _decide(self, attempt: int, hosts: list[str]) -> Decision:
        from gpufield.harden.supervise.cluster import pick_root

        reports = self.cl.gather(attempt, hosts)
        dead = self.cl.dead([h for h in hosts if h != self.me])
        for n, silent_s in dead.items():  # a node whose supervisor is gone: nothing can launch there
            if n in reports:  # it reported before it went: its report stays the evidence; it stays out below
                continue
            reports[n] = {"node": n, "kind": "lost", "t": time.time(), "ranks": [], "victim": False,
                          "why": f"supervisor gone (no heartbeat for {silent_s:g} s)",
                          "failure": dataclasses.asdict(Failure(kind=LOST, host=n, action_kind="EXCLUDE_NODE"))}
        root = pick_root(reports)
        self.policy.load(self.cl.policy_state())
        failure = Failure(**root["failure"]) if root else Failure(kind="exit")
        dec = self.policy.decide(failure)
        if dec.action == EXCLUDE and dec.host not in self.nodes and root is not None:
            dec = dataclasses.replace(dec, host=root["node"])  # triage named a host name the node list spells otherwise
        excluded = list(self.excluded)
        if dec.action == EXCLUDE and dec.host and dec.host not in excluded:
            excluded.append(dec.host)
        if dec.action in (RETRY, EXCLUDE):  # every node that is gone stays out of the next launch
            excluded += [n for n in sorted(dead) if n not in excluded]
        self.excluded = excluded
        self.cl.save_policy_state(self.policy.state())
        self.cl.publish(attempt, {"decision": dataclasses.asdict(dec), "excluded": excluded, "decider": self.me,
                                  "root": root["node"] if root else None,
                                  "reports": {n: r.get("kind") for n, r in reports.items()},
                                  "missing": [h for h in hosts if h not in reports], "lost": sorted(dead)})
        self.log.emit("cluster", attempt=attempt, decided=dec.action, root=root["node"] if root else None,
                      reports=sorted(reports), missing=[h for h in hosts if h not in reports], lost=sorted(dead))
        return dec

    def after(self, attempt: int, decision: Decision) -> None:
        """The gate round before launch ``attempt + 1``: excluded nodes validate themselves; the decider
        publishes the next plan."""
        nxt = attempt + 1
        if self.me in self.excluded:
            passed = bool(self.validate_node(self.me)) if self.validate_node is not None else False
            self.cl.post_gate(nxt, passed)
        if self.deciding:
            res = self.cl.gates(nxt, list(self.excluded))
            back = [n for n in self.excluded if res.get(n)]
            for n in back:
                self.log.emit("nodes", returned=n, reason="validation gate passed")
            excluded = [n for n in self.excluded if n not in back]
            self.cl.post_plan(nxt, [n for n in self.nodes if n not in excluded], excluded)
        self.deciding = False

    def close(self) -> None:
        """End this node's part (node 0 waits for the others before its store goes)."""
        try:
            self.cl.close()
        except Exception as e:  # the store's host may already be gone: nothing left to agree on
            self.log.emit("cluster", note=f"store closed with {type(e).__name__}: {e}")
