"""NCCL / torch environment sanity and the fabric in sysfs.

Interface and HCA lists follow NCCL's syntax (NCCL environment variable docs, ``NCCL_SOCKET_IFNAME``
and ``NCCL_IB_HCA``): a comma-separated list of name *prefixes*; a leading ``^`` excludes what the
list matches instead; a leading ``=`` (after an optional ``^``) makes the names exact; an HCA item
may end in ``:port``. ``GLOO_SOCKET_IFNAME`` is a comma-separated list of exact interface names.

Debug-only variables (triage.md section 5.10, NCCL docs: not for production): ``NCCL_P2P_DISABLE``,
``NCCL_SHM_DISABLE``, ``NCCL_IB_DISABLE``, ``NCCL_DEBUG=TRACE``, forced ``NCCL_ALGO`` /
``NCCL_PROTO``, ``CUDA_LAUNCH_BLOCKING=1``, ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, torch watchdog
switches turned off.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpufield.harden.preflight._common import name_list, result
from gpufield.harden.preflight.model import CheckResult, PreflightContext

__all__ = ["IbPorts", "IfList", "NcclEnv", "SocketIfname", "parse_if_list"]

_FALSE = ("", "0", "false", "no", "off")

#: variable -> (predicate on its value, what it does)
_DEBUG_VARS: dict[str, tuple[str, str]] = {
    "NCCL_P2P_DISABLE": ("truthy", "disables NVLink/PCIe peer-to-peer: GPU traffic goes through host memory"),
    "NCCL_SHM_DISABLE": ("truthy", "disables the shared-memory transport"),
    "NCCL_IB_DISABLE": ("truthy", "forces TCP sockets instead of InfiniBand/RoCE"),
    "NCCL_DEBUG": ("trace", "TRACE logging (needs a TRACE build, floods the log)"),
    "NCCL_ALGO": ("set", "forces NCCL's algorithm choice"),
    "NCCL_PROTO": ("set", "forces NCCL's protocol choice"),
    "CUDA_LAUNCH_BLOCKING": ("truthy", "serialises every CUDA kernel launch"),
    "TORCH_DISTRIBUTED_DEBUG": ("detail", "checks every collective's consistency (slow)"),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": ("zero", "a timed-out collective no longer ends the job: hangs stay hung"),
    "NCCL_ASYNC_ERROR_HANDLING": ("zero", "(old name) a timed-out collective no longer ends the job"),
    "TORCH_NCCL_ENABLE_MONITORING": ("zero", "turns off the watchdog heartbeat monitor"),
    "TORCH_NCCL_BLOCKING_WAIT": ("truthy", "blocking wait: each collective is waited for on the CPU (debugging)"),
}


def _flagged(pred: str, value: str) -> bool:
    v = value.strip().lower()
    return {"truthy": v not in _FALSE, "trace": v == "trace", "set": v != "", "detail": v == "detail",
            "zero": v == "0"}[pred]


class NcclEnv:
    """Debug-only NCCL / torch / CUDA variables left set: warn, naming each and what it does."""

    name = "env.nccl"
    description = "debug-only NCCL / torch variables left set (NCCL_P2P_DISABLE, NCCL_IB_DISABLE, NCCL_DEBUG=TRACE...)"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the module docstring for the list."""
        env = ctx.environ
        shown = {k: v for k, v in sorted(env.items())
                 if k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_")) or k == "CUDA_LAUNCH_BLOCKING"}
        hits = [f"{k}={env[k]} ({what})" for k, (pred, what) in _DEBUG_VARS.items() if k in env and _flagged(pred, env[k])]
        values = {"set": shown, "flagged": hits}
        if hits:
            return result(self.name, "warn", f"debug-only settings left on: {name_list(hits, 3)}", values=values,
                          fix="unset them for production runs (keep NCCL_DEBUG=WARN; turn INFO on for a retry)")
        return result(self.name, "pass", f"no debug-only NCCL/torch variable set ({len(shown)} NCCL/torch variable(s) set)",
                      values=values)


@dataclass(frozen=True, slots=True)
class IfList:
    """A parsed NCCL interface / HCA list.

    Attributes:
        exclude: leading ``^``: the list names what NOT to use.
        exact: leading ``=``: names are exact, not prefixes.
        items: ``(name, port or None)`` pairs.
    """

    exclude: bool
    exact: bool
    items: tuple[tuple[str, int | None], ...]

    def matches(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL would use interface / HCA ``name`` (and ``port``) under this list."""
        hit = any((name == n if self.exact else name.startswith(n)) and (p is None or port is None or p == port)
                  for n, p in self.items)
        return hit != self.exclude


def parse_if_list(value: str) -> IfList:
    """Parse ``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` syntax (see the module docstring).

    Args:
        value: e.g. ``"^docker,lo"``, ``"=eth0"``, ``"mlx5_0:1,mlx5_1:1"``.

    Returns:
        The :class:`IfList`; a ``:port`` that is not a number is kept as part of the name.
    """
    v = value.strip()
    exclude = v.startswith("^")
    v = v[1:] if exclude else v
    exact = v.startswith("=")
    v = v[1:] if exact else v
    items = []
    for part in (p.strip() for p in v.split(",")):
        if not part:
            continue
        name, _, port = part.partition(":")
        items.append((name, int(port)) if port.isdigit() else (part, None))
    return IfList(exclude=exclude, exact=exact, items=tuple(items))


def _interfaces(ctx: PreflightContext) -> dict[str, str]:
    base = ctx.path("/sys/class/net")
    out = {}
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        try:
            out[d.name] = (d / "operstate").read_text().strip()
        except OSError:
            out[d.name] = "unknown"
    return out


class SocketIfname:
    """``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` select at least one interface that exists and is up."""

    name = "env.socket_ifname"
    description = "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name real, up interfaces"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the module docstring for the list syntax."""
        ifs = _interfaces(ctx)
        values: dict = {"interfaces": ifs}
        specs = {k: ctx.environ[k] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if ctx.environ.get(k, "").strip()}
        if not specs:
            return result(self.name, "pass", "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME unset (NCCL picks ib* first, "
                          "then any interface but docker*/lo)", values=values)
        if not ifs:
            return result(self.name, "skip", f"no network interfaces under {ctx.path('/sys/class/net')}", values=values)
        bad, notes = [], []
        for var, spec in specs.items():
            lst = parse_if_list(spec) if var == "NCCL_SOCKET_IFNAME" else IfList(
                False, True, tuple((n.strip(), None) for n in spec.split(",") if n.strip()))
            chosen = [n for n in ifs if lst.matches(n)]
            values[var] = {"value": spec, "selected": chosen}
            up = [n for n in chosen if ifs[n] in ("up", "unknown")]
            if not chosen:
                bad.append(f"{var}={spec!r} matches no interface (have {', '.join(ifs)})")
            elif not up:
                bad.append(f"{var}={spec!r} selects only interfaces that are down ({', '.join(chosen)})")
            elif set(up) == {"lo"}:
                notes.append(f"{var} selects only loopback: multi-node jobs cannot connect")
        if bad:
            return result(self.name, "fail", "; ".join(bad), values=values,
                          fix="set it to an interface from `ip -br link` (prefix list, ^ to exclude, = for exact names)")
        if notes:
            return result(self.name, "warn", "; ".join(notes), values=values)
        sel = "; ".join(f"{k} -> {', '.join(values[k]['selected'])}" for k in specs)
        return result(self.name, "pass", sel, values=values)


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


class IbPorts:
    """InfiniBand / RoCE ports in ``/sys/class/infiniband``: HCAs named by ``NCCL_IB_HCA`` must be ACTIVE;
    other ports down or ports at differing rates warn."""

    name = "net.ib_ports"
    description = "IB/RoCE devices and ports active (/sys/class/infiniband/*/ports/*/state)"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        base = ctx.path("/sys/class/infiniband")
        ports = []
        for dev in sorted(base.iterdir()) if base.is_dir() else []:
            for pd in sorted((dev / "ports").iterdir(), key=lambda q: q.name) if (dev / "ports").is_dir() else []:
                state = _read(pd / "state") or "?"
                ports.append({"device": dev.name, "port": int(pd.name) if pd.name.isdigit() else pd.name,
                              "state": state.split(":")[-1].strip(), "phys_state": (_read(pd / "phys_state") or "?").split(":")[-1].strip(),
                              "rate": _read(pd / "rate"), "link_layer": _read(pd / "link_layer")})
        values: dict = {"ports": ports}
        if not ports:
            return result(self.name, "skip", f"no InfiniBand/RoCE devices under {base}", values=values)
        hca = ctx.environ.get("NCCL_IB_HCA", "").strip()
        down = [f"{p['device']}/{p['port']} {p['state']}" for p in ports if p["state"] != "ACTIVE"]
        if hca:
            lst = parse_if_list(hca)
            used = [p for p in ports if lst.matches(p["device"], p["port"] if isinstance(p["port"], int) else None)]
            values["NCCL_IB_HCA"] = {"value": hca, "selected": [f"{p['device']}/{p['port']}" for p in used]}
            if not used:
                return result(self.name, "fail", f"NCCL_IB_HCA={hca!r} matches no port (have "
                              f"{name_list([p['device'] for p in ports])})", values=values,
                              fix="list devices with ibv_devinfo / ibstat and fix NCCL_IB_HCA")
            bad = [f"{p['device']}/{p['port']} {p['state']}" for p in used if p["state"] != "ACTIVE"]
            if bad:
                return result(self.name, "fail", f"ports NCCL_IB_HCA selects are not ACTIVE: {name_list(bad)}",
                              values=values, fix="check cables and the subnet manager (ibstat, ibportstate)")
        rates = {p["rate"] for p in ports if p["state"] == "ACTIVE" and p["rate"]}
        if len(rates) > 1:
            return result(self.name, "warn", f"active ports run at different rates: {', '.join(sorted(rates))}",
                          values=values, fix="a port below the others' rate has trained down: check its cable")
        if down and not hca:
            return result(self.name, "warn", f"ports not ACTIVE: {name_list(down)} (NCCL skips them)", values=values,
                          fix="if these ports should carry traffic check cables and the subnet manager")
        n = sum(p["state"] == "ACTIVE" for p in ports)
        return result(self.name, "pass", f"{n} IB/RoCE port(s) ACTIVE" + (f" at {rates.pop()}" if rates else ""),
                      values=values)
