"""engine/phases.scan_files (block-wise RE2 prefilter) agrees with the pure scan_text reference."""

from __future__ import annotations

import gzip

import pytest

from gpufield.triage.engine.phases import scan_block, scan_files, scan_text

# banner shapes quoted in gpufield/triage/engine/phases.py (HF datasets/transformers, DeepSpeed, Trainer)
BANNERS = [
    "Generating train split: 2230000 examples [29:59, 1239.06 examples/s]",
    "Map (num_proc=8):  45%|████▌     | 1003500/2230000 [03:12<03:55, 5210.3 examples/s]",
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/modeling_utils.py", line 3850, in from_pretrained',
    "[2024-03-02 10:11:12,123] [INFO] [engine.py:3475:_save_checkpoint] [Torch] Checkpoint global_step500 is about to be saved!",
    "Saving model checkpoint to out/checkpoint-500",
    "[2024-03-02 10:12:40,002] [INFO] [engine.py:3570:_save_zero_checkpoint] successfully saved checkpoint",
    "{'train_runtime': 119.8, 'train_samples_per_second': 8.5, 'train_loss': 1.23, 'epoch': 2.57}",
    "LOADING CHECKPOINT SHARDS: 100%|██████████| 4/4",  # case does not matter
]


def _log() -> str:
    out = []
    for i in range(3000):
        out.append(f"[2024-03-02 10:{i // 60 % 60:02d}:{i % 60:02d},000] [INFO] step {i} | loss 1.{i % 97:02d} | lr 2e-05")
        if i % 250 == 7:
            out.append(BANNERS[(i // 250) % len(BANNERS)])
    return "\n".join(out) + "\nSaving model checkpoint to out/checkpoint-final"  # no final newline


@pytest.mark.parametrize("block_bytes", [4096, 50_000, 8 << 20])
def test_scan_files_matches_scan_text_across_blocks_and_gzip(tmp_path, block_bytes):
    text = _log()
    plain, gz = tmp_path / "train.log", tmp_path / "train.log.gz"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))
    expected = scan_text(text, str(plain))
    assert len(expected) == 13 and expected[-1].phase == "checkpoint_save" and expected[-1].line == 3013
    assert {m.phase for m in expected} == {"setup", "checkpoint_save", "checkpoint_done"}
    assert scan_files([plain], block_bytes=block_bytes) == expected
    assert [(m.line, m.phase, m.text) for m in scan_files([gz], block_bytes=block_bytes)] == \
        [(m.line, m.phase, m.text) for m in expected]


def test_scan_files_skips_binary_missing_and_empty(tmp_path):
    (tmp_path / "bin").write_bytes(b"\x00\x01Saving model checkpoint\n")
    (tmp_path / "empty").write_bytes(b"")
    assert scan_files([tmp_path / "bin", tmp_path / "empty", tmp_path / "missing"]) == []
    assert scan_block(b"", "x") == []


def _hook_marks(paths, **opts):
    from gpufield.triage.engine.phases import marks_in_block
    from gpufield.triage.ingest import IngestOptions, ingest

    marks = []
    res = ingest(paths, options=IngestOptions(year=2026, **opts),
                 on_block=lambda p, b, s, n, base: marks.extend(marks_in_block(b, s, n, p, base + 1)))
    return marks, res


@pytest.mark.parametrize("block_bytes", [4096, 8 << 20])
def test_ingest_hook_finds_the_marks_in_the_same_read(tmp_path, block_bytes):
    p = tmp_path / "train.log"
    p.write_text(_log())
    marks, _ = _hook_marks([p], block_bytes=block_bytes, with_loss=True, loss_every=1000)
    assert marks == scan_text(_log(), str(p))


def test_ingest_hook_agrees_with_scan_files_on_the_corpus(shared_dir):
    marks, res = _hook_marks([shared_dir / "data" / "triage-cases"])
    read = [f.path for f in res.stats.files]
    assert marks == scan_files(read) and len(marks) == 3
