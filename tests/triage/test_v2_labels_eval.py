"""Issue 23: the INDEX.md grammar of docs/triage-labels.md and the v2 eval numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpufield.errors import InputError
from gpufield.triage.evaluate import EvalReport, evaluate, score
from gpufield.triage.labels import norm_gpu, parse_index, split_cells

HEAD = "| # | Case file | Expected class | blame | action | split |\n|---|---|---|---|---|---|\n"


def _index(tmp_path, rows: str):
    p = tmp_path / "INDEX.md"
    p.write_text(HEAD + rows, encoding="utf-8")
    return p


def test_optional_columns_clean_rows_and_directories(tmp_path):
    p = _index(tmp_path, "| a1 | `runs/kill/` | `HOST_OOM_KILL` | host=node-b rank=1,3 gpu=0000:3B:00.0 | "
                         "FIX_CONFIG chmod !--shm-size | dev |\n"
                         "| a2 | `c.log` `d.log` | clean (NaN grad-norm warnings only) | - | - | test |\n"
                         "| a3 | `e.log` | `CONTAINER_SHM_IPC` | peer=10.0.0.2 | `--ipc=host` | |\n")
    a1, a2, a3 = parse_index(p)
    assert a1.paths == ("runs/kill/",) and a1.split == "dev"
    assert dict(a1.blame) == {"host": ("node-b",), "rank": ("1", "3"), "gpu": ("0000:3B:00.0",)}
    assert a1.action == (("FIX_CONFIG", False), ("chmod", False), ("--shm-size", True))
    assert a2.clean and a2.expected == "NONE" and a2.paths == ("c.log", "d.log") and a2.split == "test"
    assert a3.split is None and a3.action == (("--ipc=host", False),)


@pytest.mark.parametrize("row, msg", [
    ("| 1 | `a.log` | `NAN_LOSS` | - | - |\n", "cells"),                     # a cell missing
    ("| 1 | a.log | `NAN_LOSS` | - | - | dev |\n", "backticked case path"),  # path not backticked
    ("| 1 | `a.log` | nan loss | - | - | dev |\n", "CLASS"),                  # no class
    ("| 1 | `a.log` | `NAN_LOSS` | node=x | - | dev |\n", "blame token"),    # unknown blame key
    ("| 1 | `a.log` | `NAN_LOSS` | rank=two | - | dev |\n", "not an integer"),
    ("| 1 | `a.log` | `NAN_LOSS` | - | - | train |\n", "split"),
])
def test_unreadable_rows_are_refused_with_file_and_line(tmp_path, row, msg):
    p = _index(tmp_path, "| 0 | `ok.log` | `NAN_LOSS` | - | - | dev |\n" + row)
    with pytest.raises(InputError, match=msg) as e:
        parse_index(p)
    assert e.value.line == 4 and e.value.path == str(p)


def test_pipes_in_code_spans_and_escaped_pipes_stay_in_their_cell():
    # shared INDEX row 07 has "`lspci -vvv | grep ACSCtl`" in its action column
    assert split_cells("| 07 | `a.log` | `lspci -vvv | grep ACSCtl` | x \\| y |") == [
        "07", "`a.log`", "`lspci -vvv | grep ACSCtl`", "x | y"]


def test_missing_case_path_is_refused_with_the_index_line(tmp_path):
    p = _index(tmp_path, "| 1 | `nope.log` | `NAN_LOSS` | - | - | dev |\n")
    with pytest.raises(InputError, match="does not exist") as e:
        evaluate(tmp_path, index=p)
    assert e.value.line == 3


def _inc(**kw):
    base = dict(host=None, rank=None, gpu=None, peer=None, action_kind="RETRY", action="", next_evidence=(),
                established=True)
    return SimpleNamespace(**{**base, **kw})


def test_blame_and_action_scoring(tmp_path):
    p = _index(tmp_path, "| 1 | `a.log` | `CONTAINER_SHM_IPC` | host=node-b gpu=3b:00.0 | FIX_CONFIG chmod "
                         "!--shm-size | dev |\n| 2 | `b.log` | clean | - | - | dev |\n"
                         "| 3 | `c.log` | `PEER_PROCESS_EXIT` | peer=10.1.2.3 | COLLECT | test |\n")
    c1, c2, c3 = parse_index(p)
    good = _inc(host="node-b.cluster", gpu="00000000:3B:00.0", action_kind="FIX_CONFIG",
                action="chmod 1777 /dev/shm inside the container")
    r = score(c1, [("CONTAINER_SHM_IPC", True, 0.8)], good)
    assert r.correct and r.blame == {"host": True, "gpu": True} and r.blame_ok and r.action_ok
    r = score(c1, [("CONTAINER_SHM_IPC", True, 0.8)], _inc(host="node-a", gpu="3b:00.0", action_kind="FIX_CONFIG",
                                                          action="chmod, or raise --shm-size"))
    assert r.blame == {"host": False, "gpu": True} and not r.blame_ok and r.action_ok is False
    # clean rows: right only when nothing is reported
    assert score(c2, []).correct and not score(c2, [("NAN_LOSS", True, 0.85)]).correct
    r3 = score(c3, [("PEER_PROCESS_EXIT", False, 0.4)], _inc(peer="10.1.2.3<47013>", established=False))
    assert r3.blame_ok and r3.action_ok
    rep = EvalReport(str(tmp_path), [score(c1, [("CONTAINER_SHM_IPC", True, 0.8)], good),
                                     score(c2, [("NAN_LOSS", True, 0.85)]), r3])
    d = rep.to_dict()
    assert d["clean"] == {"rows": 1, "with_incident": [{"case": "2", "reported": ["NAN_LOSS"]}]}
    assert d["blame"]["right"] == 2 and d["blame"]["labelled"] == 2 and d["action"]["right"] == 2
    assert d["precision_recall"]["NAN_LOSS"] == {"tp": 0, "predicted": 1, "expected": 0, "precision": 0.0,
                                                 "recall": None}
    assert d["splits"]["dev"]["cases"] == 2 and d["splits"]["test"]["accuracy"] == 1.0
    assert norm_gpu("GPU 3") == "3" and norm_gpu("0000:3b:00") == "3b:00.0"
