"""onnxruntime as the independent forward oracle: load-time differential check and
counterexample validation.

Shape legend: B batch, * node shape without batch, N flattened input size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpufield._files import read_bytes
from gpufield.errors import ModelFormatError, require

_INPUT_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64}


class OrtModel:
    """An onnxruntime session over one ONNX model (CPU provider, one thread).

    Args:
        path: ``.onnx`` or ``.onnx.gz`` file.

    Raises:
        ModelFormatError: onnxruntime cannot load the model.
    """

    def __init__(self, path: str | Path):
        ort = require("onnxruntime", "verify")
        p = Path(path)
        self.path = str(p)  # the model file (verify.dist sends it to the ranks that join a search)
        data = read_bytes(p)  # .gz gunzipped; truncated: InputError naming the file
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self.sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise ModelFormatError(f"onnxruntime cannot load the model: {e}", path=str(path)) from e
        inp = self.sess.get_inputs()[0]
        if inp.type not in _INPUT_DTYPES:
            raise ModelFormatError(f"input {inp.name!r} has type {inp.type}; only float (float32) and "
                                   "double (float64) inputs are supported", path=str(path))
        self.input_name = inp.name
        self.input_dtype = _INPUT_DTYPES[inp.type]
        self.input_shape = [d if isinstance(d, int) else 1 for d in inp.shape]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Forward one point in the model's input dtype (float32 or float64).

        Args:
            x: any array with the input's element count (values must be representable in the
                input dtype: a float32 point is exact in both).

        Returns:
            The flat output as float64, exactly onnxruntime's values.
        """
        xi = np.asarray(x, dtype=self.input_dtype).reshape(self.input_shape)
        return np.asarray(self.sess.run(None, {self.input_name: xi})[0]).astype(np.float64).reshape(-1)


def differential_check(graph, ort_model: OrtModel, lo_N: np.ndarray, hi_N: np.ndarray,
                       *, n_points: int = 8, atol: float = 1e-4, rtol: float = 1e-4,
                       seed: int = 0) -> float:
    """Compare the IR forward (float32, torch) with onnxruntime on points of the input box.

    Args:
        graph: the loaded :class:`~gpufield.verify.graph.Graph`.
        ort_model: the oracle.
        lo_N, hi_N: box bounds, float64 ``[N]``.
        n_points: random points (the two extreme corners are added).
        atol, rtol: allowed ``|ours − ort| ≤ atol + rtol·|ort|``.
        seed: RNG seed.

    Returns:
        The largest absolute difference seen.

    Raises:
        ModelFormatError: the forwards differ above tolerance (the message gives by how much).
    """
    import torch

    rng = np.random.default_rng(seed)
    pts = [lo_N, hi_N] + [lo_N + (hi_N - lo_N) * rng.random(lo_N.shape) for _ in range(n_points)]
    X = np.stack(pts).astype(np.float32)
    g32 = graph.cast(torch.float32, "cpu")
    with torch.no_grad():
        ours = g32.forward(torch.from_numpy(X).reshape(len(pts), *graph.input_shape)).reshape(len(pts), -1)
    worst, excess = 0.0, -np.inf
    for i, x in enumerate(X):
        ref = ort_model(x)
        d = np.abs(ours[i].numpy().astype(np.float64) - ref)
        worst = max(worst, float(d.max()))
        excess = max(excess, float((d - (atol + rtol * np.abs(ref))).max()))
    if excess > 0:
        raise ModelFormatError(
            f"our forward differs from onnxruntime by up to {worst:.3g} (tolerance {atol:g} + "
            f"{rtol:g}·|y|) on points of the input box; refusing to verify",
            path=graph.source,
        )
    return worst
