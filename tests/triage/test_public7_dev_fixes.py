"""Root fixes for the public7 dev-set misses (tests/triage/corpus/public7, a development set: every row dev),
each checked on the row's real excerpt against the row's own label, plus the message's other spelling.

Independent sources: the rows' labels (class, blame) from each thread's resolution; the message as PyTorch's
ProcessGroupNCCL prints it (both spellings are seen in the real threads cited below).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _triage_helpers import check_dev_row, top_incident_of_text

from gpufield.triage.labels import parse_index
from gpufield.triage.parsers._prefix import split_prefix

CORPUS = Path(__file__).parent / "corpus" / "public7"
FIXED = {
    "q014": "https://github.com/NVIDIA/nccl/issues/845",
    "q022": "https://github.com/huggingface/accelerate/issues/1519",
}


@pytest.fixture(scope="module")
def rows():
    return {c.number: c for c in parse_index(CORPUS / "INDEX.md") if c.number in FIXED}


@pytest.mark.parametrize("rid", sorted(FIXED))
def test_row_is_right_on_class_blame_and_action(rows, rid):
    check_dev_row(CORPUS, rows[rid], FIXED[rid])


# --- the ncclUniqueId store wait, in the misspelling older torch printed ----------------------------------


@pytest.mark.parametrize("verb", ["retreiving", "retrieving"])
def test_unique_id_wait_is_a_setup_wait_on_rank_0_in_both_spellings(tmp_path, verb):
    # https://github.com/NVIDIA/nccl/issues/845 ("retreiving"); https://github.com/RUCAIBox/RecBole/issues/2069
    line = (f"RuntimeError: [3] is setting up NCCL communicator and {verb} ncclUniqueId from [0] via c10d "
            "key-value store by key '1', but store->get('1') got error: Socket Timeout Exception raised from recvByte")
    top = top_incident_of_text(tmp_path, line)
    assert (top.cls, top.rank) == ("SETUP_PHASE_TIMEOUT", 0)


# --- a launcher's "[host:local_rank]:" tee prefix names the host of every line it forwards -----------------


def test_host_local_rank_prefix_names_host_and_local_rank():
    # https://github.com/huggingface/accelerate/issues/1519 (verbatim line)
    line = ("[gpu187:1]:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB (GPU 1; 79.35 GiB "
            "total capacity; 33.66 GiB already allocated; 735.69 MiB free; 34.89 GiB reserved in total by PyTorch)")
    p = split_prefix(line, 2023)
    assert (p.host, p.local_rank, p.rank) == ("gpu187", 1, None)
    assert p.body.startswith("torch.cuda.OutOfMemoryError: CUDA out of memory.")
    # the torch rank prefix and a bracketed python-logging time keep their meaning
    assert split_prefix("[rank3]:[E ProcessGroupNCCL.cpp:737] x", 2023).rank == 3
    q = split_prefix("[2022-02-16 01:23:00,852] [INFO] x", 2023)
    assert q.host is None and q.ts_ns is not None
