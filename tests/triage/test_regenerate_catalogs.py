"""tools/regenerate_triage_catalogs.py: --check on the shipped catalogues, tamper detection, parsers
of the upstream formats (inputs rebuilt in the upstream syntax from the shipped rows)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "regenerate_triage_catalogs.py"
spec = importlib.util.spec_from_file_location("regenerate_triage_catalogs", TOOL)
regen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(regen)


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    shutil.copytree(regen.DATA, d)
    return d


def test_check_passes_on_the_shipped_catalogues(capsys):
    assert regen.main(["--check"]) == 0
    assert "7 catalogue files match" in capsys.readouterr().out


def test_check_catches_a_changed_byte_an_unlisted_file_and_update_sha_repairs(data, capsys):
    p = data / "nccl_result.csv"
    p.write_bytes(p.read_bytes().replace(b"timeout", b"Timeout"))
    (data / "extra.csv").write_text("code\n")
    assert regen.main(["--check", "--data-dir", str(data)]) == 1
    err = capsys.readouterr().err
    assert "nccl_result.csv: sha256" in err and "extra.csv: not listed" in err
    (data / "extra.csv").unlink()
    assert regen.main(["--update-sha", "--data-dir", str(data)]) == 0
    assert regen.main(["--check", "--data-dir", str(data)]) == 0
    assert json.loads((data / "SOURCES.json").read_text())["nccl_result.csv"]["sha256"] == regen.sha256(p)


def test_xid_text_from_go_slice_reproduces_the_shipped_file(data, tmp_path):
    _, rows = regen._shipped(data, "xid_text.csv")
    go = "package collector\n\nvar xidErrCodeToText = []string{\n" + "".join(
        f"\t// {code}\n\t{json.dumps(rows[code][1])},\n" for code in sorted(rows)) + "}\n"
    (tmp_path / "xid_errors.go").write_text(go)
    before = (data / "xid_text.csv").read_bytes()
    assert regen.main(["xid_text.csv", str(tmp_path / "xid_errors.go"), "--data-dir", str(data)]) == 0
    assert (data / "xid_text.csv").read_bytes() == before


def test_ib_and_nccl_tables_from_c_sources_keep_meanings(data, tmp_path):
    _, ib = regen._shipped(data, "ib_wc_status.csv")
    (tmp_path / "verbs.h").write_text("enum ibv_wc_status {\n" + "".join(
        f"\t{ib[c][1]}{' = 0' if c == 0 else ''}, /* {c} */\n" for c in sorted(ib)) + "};\n")
    (tmp_path / "enum_strs.c").write_text("static const char *const wc_status_str[] = {\n" + "".join(
        f'\t\t[{ib[c][1]}]\t= "{ib[c][2]}",\n' for c in sorted(ib) if ib[c][2]) + "\t};\n")
    _, nr = regen._shipped(data, "nccl_result.csv")
    (tmp_path / "nccl.h.in").write_text("typedef enum { " + "".join(
        f"{nr[c][1]} = {c},\n" for c in sorted(nr)) + f"ncclNumResults = {max(nr) + 1} }} ncclResult_t;\n")
    (tmp_path / "init.cc").write_text("const char* ncclGetErrorString(ncclResult_t code) {\n  switch (code) {\n" + "".join(
        f'    case {nr[c][1]} : return "{nr[c][2]}";\n' for c in sorted(nr)) + "  }\n}\n")
    before = {n: (data / n).read_bytes() for n in ("ib_wc_status.csv", "nccl_result.csv")}
    assert regen.main(["ib_wc_status.csv", str(tmp_path / "verbs.h"), str(tmp_path / "enum_strs.c"), "--data-dir",
                       str(data), "--commit", "0" * 40]) == 0
    assert regen.main(["nccl_result.csv", str(tmp_path / "nccl.h.in"), str(tmp_path / "init.cc"), "--data-dir",
                       str(data)]) == 0
    assert {n: (data / n).read_bytes() for n in before} == before
    assert json.loads((data / "SOURCES.json").read_text())["ib_wc_status.csv"]["commit"] == "0" * 40


def test_check_catches_an_unquoted_comma(data, capsys):
    p = data / "xid_triage.csv"
    p.write_text(p.read_text().replace('"uncorrectable DRAM (double-bit ECC) error: drain, check row-remap state, reset; '
                                       'recurring means RMA"', "uncorrectable DRAM error: drain, reset"))
    regen.update_sha(data)
    assert regen.main(["--check", "--data-dir", str(data)]) == 1
    assert "xid_triage.csv:" in capsys.readouterr().err


def test_bad_arguments_and_unparsable_upstream(data, tmp_path, capsys):
    assert regen.main(["xid_triage.csv", "--data-dir", str(data)]) == 2
    (tmp_path / "x.go").write_text("package x\n")
    assert regen.main(["xid_text.csv", str(tmp_path / "x.go"), "--data-dir", str(data)]) == 2
    (tmp_path / "bad.csv").write_text("79,ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS,RESTART_BM\n")
    assert regen.main(["xiderrorsmapping.csv", str(tmp_path / "bad.csv"), "--data-dir", str(data)]) == 2
    assert "bad.csv:1" in capsys.readouterr().err
    assert regen.main(["--check", "--data-dir", str(data)]) == 0  # nothing was written
