"""Run ``gpufield preflight`` on this node and keep the JSON with the time each check took.

Writes one JSON document: the machine (host, platform, Python, torch / CUDA versions, NVML's
driver and GPUs as preflight saw them), the exact command line, and ``--repeat`` preflight reports
(schema ``gpufield.preflight/1``, each check's ``elapsed_s``), plus per-check min / median / max.
The first run pays the cold costs (NVML init, importing the triage parser, torch in the ranks);
later runs show the warm ones. Needs no network.

On a GPU node (torch with CUDA; nothing else installed)::

    PYTHONPATH=src python benchmarks/harden_preflight.py --out benchmarks/results/h200-preflight.json

On one GPU the all-reduce runs on CPU with gloo (NCCL needs >= 2 GPUs); on two or more it runs
NCCL across all of them and compares busbw with the catalogue's NVLink figure.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpufield.errors import InputError  # noqa: E402
from gpufield.harden.preflight import PreflightConfig, run_preflight, to_dict, write_report  # noqa: E402


def _versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        import torch

        out.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
                   cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0)
    except ImportError:
        out["torch"] = None
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (2 on bad arguments)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write (temp file + rename)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--repeat", type=int, default=3, help="preflight runs (first one cold)")
    ap.add_argument("--expect-gpus", type=int, default=None)
    ap.add_argument("--expect-model", default=None)
    ap.add_argument("--checkpoint-dir", default=".")
    ap.add_argument("--min-free-disk-gib", type=float, default=10.0)
    ap.add_argument("--allreduce-mib", type=float, default=256.0)
    ap.add_argument("--allreduce-iters", type=int, default=20)
    ap.add_argument("--skip", action="append", default=[])
    a = ap.parse_args(argv)
    try:
        if a.repeat < 1:
            raise InputError(f"--repeat must be >= 1, got {a.repeat}")
        cfg = PreflightConfig(expected_gpu_count=a.expect_gpus, expected_gpu_model=a.expect_model,
                              checkpoint_dir=a.checkpoint_dir, min_free_disk_gib=a.min_free_disk_gib,
                              allreduce_bytes=int(a.allreduce_mib * 2**20), allreduce_iters=a.allreduce_iters)
        out = Path(a.out)
        if out.exists() and not a.force:
            raise InputError("file exists; pass --force to replace it", path=str(out))
        reports = []
        for i in range(a.repeat):
            rep = run_preflight(cfg, skip=a.skip)
            reports.append(to_dict(rep))
            print(f"run {i + 1}/{a.repeat}: {rep.status} in {rep.elapsed_s:.2f} s", file=sys.stderr)
        times: dict[str, list[float]] = {}
        for d in reports:
            for c in d["checks"]:
                times.setdefault(c["name"], []).append(c["elapsed_s"])
        doc = {
            "what": "gpufield preflight per-check wall times (benchmarks/harden_preflight.py)",
            "command": " ".join(["python", "benchmarks/harden_preflight.py", *(argv if argv is not None else sys.argv[1:])]),
            "machine": {"host": reports[0]["host"], **_versions()},
            "per_check_elapsed_s": {n: {"min": min(v), "median": statistics.median(v), "max": max(v), "runs": v}
                                    for n, v in times.items()},
            "total_elapsed_s": [d["elapsed_s"] for d in reports],
            "reports": reports,
        }
        write_report(json.dumps(doc, indent=2), out, force=a.force)
    except InputError as e:
        print(f"harden_preflight: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
