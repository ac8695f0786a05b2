"""Log parsers of the triage wing: the explicit table :data:`PARSERS`, in evaluation order.

Each entry implements :class:`gpufield.triage.protocols.LogParser` (and optionally
:class:`~gpufield.triage.protocols.RecordParser`). Order matters: a candidate line goes to the
first parser whose prefilter matches and that returns an event, so specific parsers come before
the generic Python-exception fallback.

=============  ==========  ====================================================================
parser         source      formats
=============  ==========  ====================================================================
journal_json   (inner)     ``journalctl -o json`` entries: the MESSAGE goes to the parsers below,
                           the entry's time / host / pid fill in what the message lacks
kernel         kernel      NVRM Xid (all variants), fallen off the bus (multi-line), reset
                           required, GPU map, NVSwitch SXid, PCIe AER (multi-line), OOM killer,
                           mlx5 link state
nccl_tests     nccl        nccl-tests ``Test NCCL failure <file>:<line> '<ncclGetErrorString>'``
nccl           nccl        NCCL WARN / INFO ``-> N``, IB completion errors, async events,
                           ``NCCL error in:``, ``ncclSystemError`` ...
torch          torch       ProcessGroupNCCL watchdog / heartbeat / last enqueued / teardown,
                           desync, Flight Recorder
torchrun       torchrun    ChildFailedError block, ``failed (exitcode``, signals, rendezvous
cuda           cuda        CUDA errors, OOM (3 generations), DataLoader bus error
train          train/tool  NaN/Inf loss, loss-scale overflow, skipped steps, restart loop,
                           straggler table and findings
smi            smi         ``nvidia-smi -q`` sections, p2p matrices, device-handle errors
smi_csv        smi         ``nvidia-smi --query-gpu --format=csv`` and NVML sampler CSVs
lspci          smi         ``lspci -vvv`` ACS control lines
dcgm           dcgm        dcgm-exporter samples
python         torch       any other ``SomeError: message`` line
=============  ==========  ====================================================================
"""

from __future__ import annotations

from gpufield.triage.parsers.cuda import CudaParser
from gpufield.triage.parsers.dcgm import DcgmParser
from gpufield.triage.parsers.flight_recorder import FlightRecorderParser
from gpufield.triage.parsers.journal_json import JournalJsonParser
from gpufield.triage.parsers.kernel import KernelParser
from gpufield.triage.parsers.lspci import LspciParser
from gpufield.triage.parsers.nccl import NcclParser
from gpufield.triage.parsers.nccl_tests import NcclTestsParser
from gpufield.triage.parsers.python import PythonExceptionParser
from gpufield.triage.parsers.smi import SmiParser
from gpufield.triage.parsers.smi_csv import SmiCsvParser
from gpufield.triage.parsers.torch import TorchParser
from gpufield.triage.parsers.torchrun import TorchrunParser
from gpufield.triage.parsers.train import LossParser, TrainParser

__all__ = [
    "PARSERS", "LOSS_PARSER", "KernelParser", "NcclParser", "TorchParser", "TorchrunParser", "CudaParser",
    "TrainParser", "LossParser", "SmiParser", "DcgmParser", "PythonExceptionParser", "FILE_PARSERS",
    "FlightRecorderParser", "SmiCsvParser", "LspciParser", "JournalJsonParser", "NcclTestsParser",
]

_LINE_PARSERS = (
    KernelParser(), NcclTestsParser(), NcclParser(), TorchParser(),
    # a failure entry's traceback field ends with the rank's own exception line: offered to these
    TorchrunParser(inner=(NcclParser(), TorchParser(), CudaParser(), PythonExceptionParser())), CudaParser(), TrainParser(),
    SmiParser(), SmiCsvParser(), LspciParser(), DcgmParser(), PythonExceptionParser(),
)
#: the default parser table, in evaluation order (journal JSON first: its lines hold the others' keywords)
PARSERS = (JournalJsonParser(_LINE_PARSERS), *_LINE_PARSERS)

#: finite-loss parser, appended by ``IngestOptions(with_loss=True)``
LOSS_PARSER = LossParser()

#: whole-file parsers (binary or structured dumps): ingestion offers each file's first bytes to their
#: ``sniff(head)`` before the line scan and, on a hit, hands the whole file to ``parse_file(data, path)``
FILE_PARSERS = (FlightRecorderParser(),)
