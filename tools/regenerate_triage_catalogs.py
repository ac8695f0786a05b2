"""Regenerate and verify the triage wing's catalogue files (``src/gpufield/triage/data/``).

Every catalogue file names its upstream in ``data/SOURCES.json`` (URL, repository, commit, how it
was embedded) together with the sha256 of the shipped bytes. This tool cannot download anything
(CI and the development machines have no network): fetch the upstream file yourself at the commit
you want, then hand it over as a local path.

How each file is made:

=======================  =========================================================================
file                     regenerated from
=======================  =========================================================================
xiderrorsmapping.csv     NVIDIA/NVSentinel ``distros/kubernetes/nvsentinel/charts/gpu-health-monitor/
                         xiderrorsmapping.csv``: copied byte for byte (checked: 4 columns, integer
                         Xid, FATAL|NONFATAL).
xid_text.csv             NVIDIA/dcgm-exporter ``internal/pkg/collector/xid_errors.go``: the Go slice
                         ``xidErrCodeToText`` (index = Xid) becomes ``code,text`` rows.
ib_wc_status.csv         linux-rdma/rdma-core ``libibverbs/verbs.h`` (``enum ibv_wc_status``: names
                         and values) + ``libibverbs/enum_strs.c`` (``ibv_wc_status_str`` texts).
nccl_result.csv          NVIDIA/nccl ``src/nccl.h.in`` (``ncclResult_t``) + ``src/init.cc``
                         (``ncclGetErrorString`` texts).
xid_triage.csv           no upstream: written by hand from ../shared/reference/triage.md 2.1; edit
                         it, then ``--update-sha``.
nccl_error_string.csv    NVIDIA/nccl ``ncclGetErrorString`` at every v2.* release tag (``git show
                         <tag>:src/init.cc``; ``src/init.cu`` before v2.4): transcribed by hand with
                         each text's first/last release; edit it, then ``--update-sha``.
=======================  =========================================================================

The ``#`` header lines of the shipped file and its ``triage_meaning`` column (gpufield's notes,
matched by code) are kept; only the upstream-derived columns are replaced. After regenerating,
update ``commit``/``url`` in SOURCES.json by hand (or pass ``--commit``) and review the diff.

Usage::

    python tools/regenerate_triage_catalogs.py --check                     # verify shipped sha256s
    python tools/regenerate_triage_catalogs.py --update-sha                # after a hand edit
    python tools/regenerate_triage_catalogs.py xid_text.csv ~/src/dcgm-exporter/internal/pkg/collector/xid_errors.go
    python tools/regenerate_triage_catalogs.py ib_wc_status.csv verbs.h enum_strs.c --commit <sha>
    python tools/regenerate_triage_catalogs.py nccl_result.csv nccl.h.in init.cc

Exit status: 0 ok, 1 a check failed, 2 bad arguments or unparsable upstream input.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src" / "gpufield" / "triage" / "data"


def sha256(path: Path) -> str:
    """Hex sha256 of the file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_sources(data: Path) -> dict:
    """``SOURCES.json`` of ``data`` as a dict (key order kept)."""
    return json.loads((data / "SOURCES.json").read_text("utf-8"))


#: columns per row of each catalogue (a row with more is an unquoted comma that would cut a field)
COLUMNS = {"xiderrorsmapping.csv": 4, "xid_text.csv": 2, "xid_triage.csv": 3, "ib_wc_status.csv": 4,
           "nccl_result.csv": 4, "nccl_error_string.csv": 5}


def check(data: Path) -> list[str]:
    """Problems found: a listed file missing or with another sha256, a catalogue file not listed,
    a row whose column count differs from :data:`COLUMNS` (``file:line``)."""
    src = load_sources(data)
    problems = []
    for name, meta in src.items():
        if name.startswith("_"):
            continue
        path = data / name
        if not path.is_file():
            problems.append(f"{name}: listed in SOURCES.json but missing")
        elif sha256(path) != meta.get("sha256"):
            problems.append(f"{name}: sha256 {sha256(path)} != SOURCES.json {meta.get('sha256')}")
    for path in sorted(data.glob("*.csv")):
        if path.name not in src:
            problems.append(f"{path.name}: not listed in SOURCES.json")
        width = COLUMNS.get(path.name)
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if width and line and not line.startswith("#"):
                row = next(csv.reader([line]))
                if len(row) != width:
                    problems.append(f"{path.name}:{n}: {len(row)} columns, expected {width} (quote fields with commas)")
    return problems


def update_sha(data: Path, commit: dict[str, str] | None = None) -> None:
    """Rewrite the sha256 (and, if given, ``commit``) of every listed file in SOURCES.json."""
    src = load_sources(data)
    for name, meta in src.items():
        if not name.startswith("_") and (data / name).is_file():
            meta["sha256"] = sha256(data / name)
            if commit and name in commit:
                meta["commit"] = commit[name]
    (data / "SOURCES.json").write_text(json.dumps(src, indent=2, ensure_ascii=False) + "\n", "utf-8")


def _strip_c_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.DOTALL)


def _go_string(lit: str) -> str:
    return json.loads(lit)  # Go interpreted string literals use JSON-compatible escapes for this text


def parse_xid_go(text: str) -> list[tuple[int, str]]:
    """``xidErrCodeToText`` of dcgm-exporter's ``xid_errors.go``: ``[(xid, text)]``, index order."""
    m = re.search(r"xidErrCodeToText\s*=\s*\[\]string\s*\{(?P<body>.*?)\n\s*\}", text, re.DOTALL)
    if not m:
        raise ValueError("no 'xidErrCodeToText = []string{...}' in the Go file")
    body = _strip_c_comments(m["body"])
    return [(i, _go_string(s)) for i, s in enumerate(re.findall(r'"(?:[^"\\]|\\.)*"', body))]


def parse_c_enum(text: str, enum: str) -> list[tuple[int, str]]:
    """Members of C ``enum <enum> {...}`` or ``typedef enum {...} <enum>;`` with their values."""
    text = _strip_c_comments(text)
    m = (re.search(rf"enum\s+{enum}\s*\{{(?P<body>.*?)\}}", text, re.DOTALL)
         or re.search(rf"typedef\s+enum\s*\{{(?P<body>[^}}]*)\}}\s*{enum}\s*;", text, re.DOTALL))
    if not m:
        raise ValueError(f"no enum {enum} in the C header")
    out, value = [], -1
    for item in (x.strip() for x in m["body"].split(",")):
        if not item:
            continue
        name, _, expr = item.partition("=")
        value = int(expr.strip(), 0) if expr.strip() else value + 1
        out.append((value, name.strip()))
    return out


def parse_c_strings(text: str, pattern: str) -> dict[str, str]:
    """``name -> text`` pairs matched by ``pattern`` (groups ``name``, ``text``)."""
    return {m["name"]: _go_string(m["text"]) for m in re.finditer(pattern, _strip_c_comments(text))}


def _shipped(data: Path, name: str) -> tuple[list[str], dict[int, list[str]]]:
    """Header comment lines and ``{code: row}`` of a shipped catalogue file."""
    lines = (data / name).read_text("utf-8").splitlines()
    header = [ln for ln in lines if ln.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in lines if ln and not ln.startswith("#")))))
    width = COLUMNS[name]  # an unquoted comma in the last column: keep the whole text
    return header, {int(r[0]): r[:width - 1] + [",".join(r[width - 1:])] for r in rows[1:] if r and r[0].isdigit()}


def _write(data: Path, name: str, header: list[str], columns: list[str], rows: list[list[object]]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    (data / name).write_text("\n".join(header) + "\n" + buf.getvalue(), "utf-8")


def regen_xiderrorsmapping(data: Path, files: Sequence[Path]) -> None:
    """Copy NVSentinel's file unmodified after checking its shape."""
    raw = files[0].read_bytes()
    for n, row in enumerate(csv.reader(io.StringIO(raw.decode("utf-8"))), 1):
        if row and (len(row) != 4 or not row[0].strip().isdigit() or row[3].strip() not in ("FATAL", "NONFATAL")):
            raise ValueError(f"{files[0]}:{n}: expected 'xid,mnemonic,bucket,FATAL|NONFATAL', got {row}")
    (data / "xiderrorsmapping.csv").write_bytes(raw)


def regen_xid_text(data: Path, files: Sequence[Path]) -> None:
    """``code,text`` from the Go slice."""
    header, _ = _shipped(data, "xid_text.csv")
    _write(data, "xid_text.csv", header, ["code", "text"], [list(r) for r in parse_xid_go(files[0].read_text("utf-8"))])


def regen_ib_wc_status(data: Path, files: Sequence[Path]) -> None:
    """``code,name,text,triage_meaning`` from verbs.h + enum_strs.c; meanings kept by code."""
    header, old = _shipped(data, "ib_wc_status.csv")
    enum = parse_c_enum(files[0].read_text("utf-8"), "ibv_wc_status")
    texts = parse_c_strings(files[1].read_text("utf-8"), r'\[(?P<name>IBV_WC_\w+)\]\s*=\s*(?P<text>"[^"]*")')
    rows = [[code, name, texts.get(name, ""), old.get(code, ["", "", "", ""])[3]] for code, name in enum]
    _write(data, "ib_wc_status.csv", header, ["code", "name", "text", "triage_meaning"], rows)


def regen_nccl_result(data: Path, files: Sequence[Path]) -> None:
    """``code,name,text,triage_meaning`` from nccl.h.in + init.cc; meanings kept by code."""
    header, old = _shipped(data, "nccl_result.csv")
    enum = [(c, n) for c, n in parse_c_enum(files[0].read_text("utf-8"), "ncclResult_t") if n != "ncclNumResults"]
    texts = parse_c_strings(files[1].read_text("utf-8"), r'case\s+(?P<name>nccl\w+)\s*:\s*return\s*(?P<text>"[^"]*")')
    rows = [[code, name, texts.get(name, ""), old.get(code, ["", "", "", ""])[3]] for code, name in enum]
    _write(data, "nccl_result.csv", header, ["code", "name", "text", "triage_meaning"], rows)


#: catalogue file -> (number of upstream files, regenerator)
REGENERATORS: dict[str, tuple[int, Callable[[Path, Sequence[Path]], None]]] = {
    "xiderrorsmapping.csv": (1, regen_xiderrorsmapping),
    "xid_text.csv": (1, regen_xid_text),
    "ib_wc_status.csv": (2, regen_ib_wc_status),
    "nccl_result.csv": (2, regen_nccl_result),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="verify the shipped files against SOURCES.json")
    ap.add_argument("--update-sha", action="store_true", help="recompute every sha256 in SOURCES.json")
    ap.add_argument("--data-dir", type=Path, default=DATA, help="catalogue directory (default: the package's)")
    ap.add_argument("--commit", help="upstream commit to record for the regenerated file")
    ap.add_argument("catalog", nargs="?", help=f"file to regenerate: {', '.join(REGENERATORS)}")
    ap.add_argument("upstream", nargs="*", type=Path, help="local copies of the upstream source file(s)")
    args = ap.parse_args(argv)
    if args.check:
        problems = check(args.data_dir)
        for p in problems:
            print(f"FAIL {p}", file=sys.stderr)
        if not problems:
            print(f"ok: {sum(1 for k in load_sources(args.data_dir) if not k.startswith('_'))} catalogue files match SOURCES.json")
        return 1 if problems else 0
    if args.update_sha:
        update_sha(args.data_dir)
        return 0
    if args.catalog not in REGENERATORS:
        ap.print_usage(sys.stderr)
        print(f"error: name one of {', '.join(REGENERATORS)} (xid_triage.csv is edited by hand)", file=sys.stderr)
        return 2
    need, fn = REGENERATORS[args.catalog]
    if len(args.upstream) != need or not all(p.is_file() for p in args.upstream):
        print(f"error: {args.catalog} needs {need} existing upstream file(s), got {args.upstream}", file=sys.stderr)
        return 2
    try:
        fn(args.data_dir, args.upstream)
    except (ValueError, UnicodeDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    update_sha(args.data_dir, {args.catalog: args.commit} if args.commit else None)
    print(f"regenerated {args.catalog}; sha256 {sha256(args.data_dir / args.catalog)} recorded in SOURCES.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
