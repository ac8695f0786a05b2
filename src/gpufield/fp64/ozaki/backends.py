"""GEMM backends of Ozaki scheme II (implementations of :class:`gpufield.fp64.protocols.ModularBackend`).

* ``cpu-exact``: int64 matmul of the residues and the Python-integer CRT: the reference of every test.
* ``int8``: ``torch._int_mm`` (INT8 x INT8 -> INT32). Shape rules met by zero padding (M > 16, K >= 16 and a
  multiple of 8, N a multiple of 8; fp64.md 4.1, pytorch#178469); B passed column-major (row-major B fails
  for M >= 2**20 on H200); K split in chunks of 2**16 so k * 128**2 < 2**31 always.
* ``fp8``: ``torch._scaled_mm`` (E4M3 x E4M3 -> FP32, unit scales, ``use_fast_accum=False``) on two-digit
  planes (fp64.md 2.4): 3 products per modulus. Exactness on Hopper is guaranteed, not hoped for: every
  call's K is at most :data:`FP8_K_CHUNK` so that any partial sum of digit products is at most
  K * 16 * 16 < 2**14 = :data:`HOPPER_FP8_EXACT_PARTIAL_SUM`, the measured limit below which H200 FP8 MMAs
  are bit-exact (fp64.md 3.3; re-measured by benchmarks/fp64_gemm_gpu.py). Chunks are summed in int64.

On CUDA tensors the CRT runs in the Triton kernel ``gpufield.fp64.kernels.crt``; elsewhere in the
bit-identical int64-limb version ``gpufield.fp64.ozaki.crt.crt_limbs_torch``.

Shape legend: L moduli, M rows, N columns, K inner dimension.
"""

from __future__ import annotations

import torch

from gpufield.errors import InputError
from gpufield.fp64.ozaki.crt import crt_exact_python, crt_limbs_torch
from gpufield.fp64.ozaki.moduli import ModuliTable
from gpufield.fp64.ozaki.residues import fp8_combine, fp8_digit_planes

HOPPER_FP8_EXACT_PARTIAL_SUM = 2**14
"""H200 FP8 MMA is exact for integer inputs while every partial sum stays below this (fp64.md 3.3, measured)."""
FP8_MAX_DIGIT = 16
FP8_K_CHUNK = max(16 * ((HOPPER_FP8_EXACT_PARTIAL_SUM - 1) // (FP8_MAX_DIGIT**2) // 16), 16)
"""Largest multiple of 16 with K * 16**2 < 2**14: 48."""
INT8_K_CHUNK = 2**16
"""k * 128 * 128 < 2**31 for k <= 2**16 (INT32 accumulation of _int_mm is exact)."""


KERNEL_MODES = ("auto", "triton", "torch")
"""Where the fused passes run: ``auto`` = Triton on CUDA tensors, torch reference elsewhere;
``triton`` = always Triton (interpreter on CPU, for tests); ``torch`` = always the torch reference."""


def _check_mode(kernels: str) -> None:
    if kernels not in KERNEL_MODES:
        raise InputError(f"kernels must be one of {KERNEL_MODES}, got {kernels!r}")


def use_triton(kernels: str, device: torch.device) -> bool:
    """Whether the fused passes should run in Triton for this kernel mode and device.

    Raises:
        InputError: an unknown mode, or ``"triton"`` on a CPU tensor where Triton's interpreter is not
            (fully) on (:func:`gpufield.fp64.kernels.require_cpu_interpreter`).
    """
    _check_mode(kernels)
    if kernels == "triton" and device.type != "cuda":
        from gpufield.fp64.kernels import require_cpu_interpreter

        require_cpu_interpreter()
    return kernels == "triton" or (kernels == "auto" and device.type == "cuda")


def _fast_reconstruct(res_LMN, s_M, t_N, table: ModuliTable, kernels: str = "auto") -> torch.Tensor:
    if use_triton(kernels, res_LMN.device):
        from gpufield.fp64.kernels.crt import crt_triton_rows_cols

        return crt_triton_rows_cols(res_LMN, s_M, t_N, table)
    return crt_limbs_torch(res_LMN, s_M[:, None] + t_N[None, :], table)


def reconstruct_complex(be, T1, T2, T3, s_M, t_N, table) -> torch.Tensor:
    """CRT of a residue-domain Karatsuba product: re = T1 - T2, im = T3 - T1 - T2 (fp64.md 2.4).

    On the Triton path the combination is fused into the CRT kernel (the int32 products are read once);
    elsewhere it is formed in int64 and passed to ``be.reconstruct``.

    Returns:
        complex128 [M, N].
    """
    if use_triton(getattr(be, "kernels", "torch"), T1.device):
        from gpufield.fp64.kernels.crt import crt_triton_rows_cols

        re, im = crt_triton_rows_cols(T1, s_M, t_N, table, T2, T3)
        return torch.complex(re, im)
    T1, T2, T3 = (T.to(torch.int64) for T in (T1, T2, T3))
    return torch.complex(be.reconstruct(T1 - T2, s_M, t_N, table), be.reconstruct(T3 - T1 - T2, s_M, t_N, table))


def _pad_to(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    r, c = x.shape
    if r == rows and c == cols:
        return x
    out = torch.zeros((rows, cols), dtype=x.dtype, device=x.device)
    out[:r, :c] = x
    return out


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class CpuExactBackend:
    """Reference backend: int64 residue products and the Python-integer CRT (any device, slow, exact).

    Args:
        moduli_kind: ``"int8"`` (default) or ``"fp8"``: which table to use, so that both tables can be
            checked against exact arithmetic.
    """

    name = "cpu-exact"

    def __init__(self, moduli_kind: str = "int8") -> None:
        if moduli_kind not in ("int8", "fp8"):
            raise InputError(f"moduli_kind must be 'int8' or 'fp8', got {moduli_kind!r}")
        self.moduli_kind = moduli_kind
        self.residue_dtype = torch.int8 if moduli_kind == "int8" else torch.int16
        self.bound_ufp = 6 if moduli_kind == "int8" else 4  # same scalings as the int8 / fp8 backend

    def modular_matmul(self, resA_LMK, resB_LNK, table):
        """int64 [L, M, N] = resA[l] @ resB[l].T, exact (|r| <= 544, so any K < 2**43 fits)."""
        A = resA_LMK.to(torch.int64).cpu()
        B = resB_LNK.to(torch.int64).cpu()
        return torch.bmm(A, B.transpose(1, 2)).to(resA_LMK.device)

    def bound_matmul(self, hiA_MK, hiB_NK):
        """int64 exact hiA @ hiB.T."""
        return (hiA_MK.to(torch.int64).cpu() @ hiB_NK.to(torch.int64).cpu().T).to(hiA_MK.device)

    def reconstruct(self, res_LMN, s_M, t_N, table):
        """Python-integer CRT and Fraction rounding (the oracle)."""
        return crt_exact_python(res_LMN, s_M[:, None] + t_N[None, :], table).to(res_LMN.device)


class Int8Backend:
    """INT8 tensor cores through ``torch._int_mm`` (one GEMM per modulus; also runs on CPU tensors).

    Args:
        kernels: ``"auto"`` | ``"triton"`` | ``"torch"``, see :data:`KERNEL_MODES`.
        group: moduli per block-diagonal GEMM for small K (see :meth:`modular_matmul_grouped`).
        group_max_k: grouping is used when K <= this (and on the Triton path).
    """

    name = "int8"
    moduli_kind = "int8"
    residue_dtype = torch.int8
    bound_ufp = 6

    def __init__(self, kernels: str = "auto", group: int = 5, group_max_k: int = 64) -> None:
        _check_mode(kernels)  # the device is known only when a product runs
        if group < 1:
            raise InputError(f"group must be >= 1, got {group}")
        self.kernels = kernels
        self.group = group
        """Moduli per block-diagonal GEMM when K <= group_max_k (Triton path only); 1 disables grouping."""
        self.group_max_k = group_max_k

    @staticmethod
    def _int_mm(A_MK: torch.Tensor, B_NK: torch.Tensor, out_MN: torch.Tensor | None = None) -> torch.Tensor:
        """Exact A @ B.T for int8 operands (|x| <= 128): int32 (int64 if K > 2**16), padding as needed."""
        M, K = A_MK.shape
        N = B_NK.shape[0]
        Mp, Np = max(_round_up(M, 8), 32), max(_round_up(N, 8), 16)
        if K <= INT8_K_CHUNK and (Mp, Np) == (M, N) and K % 8 == 0 and K >= 16:
            a, b = A_MK.contiguous(), B_NK.contiguous()
            if out_MN is not None and out_MN.dtype == torch.int32:
                return torch._int_mm(a, b.t(), out=out_MN)  # b.t() is column-major [K, N]
            return torch._int_mm(a, b.t())
        out = None
        for k0 in range(0, max(K, 1), INT8_K_CHUNK):
            a = A_MK[:, k0:k0 + INT8_K_CHUNK]
            b = B_NK[:, k0:k0 + INT8_K_CHUNK]
            Kp = max(_round_up(a.shape[1], 8), 16)
            c = torch._int_mm(_pad_to(a, Mp, Kp).contiguous(), _pad_to(b, Np, Kp).contiguous().t())
            out = c if out is None else out.to(torch.int64) + c
        out = out[:M, :N]
        if out_MN is not None:
            out_MN.copy_(out)
            return out_MN
        return out

    def modular_matmul(self, resA_LMK, resB_LNK, table, out=None):
        """int32 (int64 if K > 2**16) [L, M, N] of _int_mm products, unreduced (the CRT kernel reduces).

        ``out``: optional [L, M, N] tensor of that dtype whose planes ``out[l]`` are contiguous (e.g. a
        strided view ``T[:, c]`` of a larger buffer); the products are written there, no extra copy.
        """
        L, M, K = resA_LMK.shape
        N = resB_LNK.shape[1]
        if out is None:
            out = torch.empty((L, M, N), dtype=torch.int32 if K <= INT8_K_CHUNK else torch.int64,
                              device=resA_LMK.device)
        for mi in range(L):
            self._int_mm(resA_LMK[mi], resB_LNK[mi], out[mi])
        return out

    def modular_matmul_grouped(self, bufA_GMX, resB_LNK, table, group, out=None):
        """Block-diagonal grouping of moduli for small K (the FFT-shaped regime): one GEMM per g moduli.

        A tall-skinny [M x K] x [K x N] INT8 GEMM with K, N = 32 runs far below peak in cuBLAS (fp64.md 3.3:
        15.7 TOPS). Group q multiplies the [M, g*K] residues of moduli q*g..q*g+g-1 (side by side, from
        ``scale_residues_triton(..., group=g)``) by the block-diagonal [g*K, g*N] matrix of their B residues,
        so g products come out of one GEMM with g times more useful width. The zero blocks contribute exact
        zeros, so each output is still a K-term integer sum (exact in int32).

        Args:
            bufA_GMX: int8 [G, M, g*K] grouped residues of A.
            resB_LNK: int8 [L, N, K] residues of B^T.
            table: moduli table.
            group: g.
            out: optional int32 [G, M, g*N] destination with contiguous planes ``out[q]`` (written in place).

        Returns:
            int32 [G, M, g*N] grouped products (input layout of ``crt_triton_rows_cols(..., group=g)``).
        """
        G, M, gK = bufA_GMX.shape
        L, N, K = resB_LNK.shape
        if out is None:
            out = torch.empty((G, M, group * N), dtype=torch.int32, device=bufA_GMX.device)
        for q in range(G):
            Bd = torch.zeros((group * N, group * K), dtype=torch.int8, device=resB_LNK.device)
            for li in range(group):
                mi = q * group + li
                if mi < L:
                    Bd[li * N:(li + 1) * N, li * K:(li + 1) * K] = resB_LNK[mi]
            self._int_mm(bufA_GMX[q], Bd, out[q])
        return out

    def bound_matmul(self, hiA_MK, hiB_NK):
        """Exact hiA @ hiB.T with entries <= 64 in int8 (K chunked so 64*64*k < 2**31)."""
        M, K = hiA_MK.shape
        acc = torch.zeros((M, hiB_NK.shape[0]), dtype=torch.int64, device=hiA_MK.device)
        for k0 in range(0, K, 2**18):
            a = hiA_MK[:, k0:k0 + 2**18].to(torch.int8)
            b = hiB_NK[:, k0:k0 + 2**18].to(torch.int8)
            acc += self._int_mm(a, b).to(torch.int64)
        return acc

    def reconstruct(self, res_LMN, s_M, t_N, table):
        """Triton CRT on CUDA, int64-limb CRT elsewhere (bit-identical)."""
        return _fast_reconstruct(res_LMN, s_M, t_N, table, self.kernels)


class Fp8Backend:
    """FP8 (E4M3) tensor cores through ``torch._scaled_mm`` with two-digit residues (3 products per modulus).

    Args:
        k_chunk: K of every ``_scaled_mm`` call; the default :data:`FP8_K_CHUNK` guarantees exactness on
            Hopper. Larger values are refused unless ``allow_unsafe_chunk`` (for the accumulation experiment).
        kernels: ``"auto"`` | ``"triton"`` | ``"torch"``, see :data:`KERNEL_MODES`.
    """

    name = "fp8"
    moduli_kind = "fp8"
    residue_dtype = torch.int16
    bound_ufp = 4

    def __init__(
        self, k_chunk: int = FP8_K_CHUNK, *, allow_unsafe_chunk: bool = False, kernels: str = "auto"
    ) -> None:
        _check_mode(kernels)  # the device is known only when a product runs
        self.kernels = kernels
        if k_chunk % 16 or k_chunk <= 0:
            raise InputError(f"k_chunk must be a positive multiple of 16, got {k_chunk}")
        if k_chunk * FP8_MAX_DIGIT**2 >= HOPPER_FP8_EXACT_PARTIAL_SUM and not allow_unsafe_chunk:
            raise InputError(
                f"k_chunk={k_chunk}: partial sums up to {k_chunk * 256} >= 2**14 are not exact on Hopper FP8"
            )
        self.k_chunk = k_chunk

    def _mm(self, A_MK: torch.Tensor, B_NK: torch.Tensor) -> torch.Tensor:
        """Exact int64 A @ B.T for float8_e4m3fn integer operands |x| <= 16, chunked along K.

        Each call's result is exact (partial sums < 2**14); chunk results are summed in float32 while
        K * 256 < 2**24 (every partial sum of chunk results is then an integer below 2**24, exact in FP32),
        otherwise in int64.
        """
        M, K = A_MK.shape
        N = B_NK.shape[0]
        Mp, Np = _round_up(max(M, 16), 16), _round_up(max(N, 16), 16)
        one = torch.ones((), dtype=torch.float32, device=A_MK.device)
        fp32_exact = K * FP8_MAX_DIGIT**2 < 2**24
        acc = None
        for k0 in range(0, max(K, 1), self.k_chunk):
            a = A_MK[:, k0:k0 + self.k_chunk]
            b = B_NK[:, k0:k0 + self.k_chunk]
            Kp = _round_up(max(a.shape[1], 16), 16)
            a = _pad_to(a, Mp, Kp).contiguous()
            b = _pad_to(b, Np, Kp).contiguous()
            c = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                                 use_fast_accum=False)
            if acc is None:
                acc = c if fp32_exact else c.to(torch.int64)
            elif fp32_exact:
                acc.add_(c)
            else:
                acc.add_(c.to(torch.int64))
        return acc[:M, :N].to(torch.int64)

    @staticmethod
    def to_fp8(d: torch.Tensor) -> torch.Tensor:
        """int8 digits (|d| <= 16, exact in E4M3) to float8_e4m3fn."""
        return d.to(torch.float16).to(torch.float8_e4m3fn)

    def modular_matmul(self, resA_LMK, resB_LNK, table):
        """int64 [L, M, N] congruent products from 3 digit GEMMs per modulus."""
        outs = []
        for mi in range(table.num_moduli):
            dA = [self.to_fp8(d) for d in fp8_digit_planes(resA_LMK[mi], table, mi)]
            dB = [self.to_fp8(d) for d in fp8_digit_planes(resB_LNK[mi], table, mi)]
            if table.square_root(mi) is not None:  # [hi, lo]: hi*lo', lo*hi', lo*lo'
                C = [self._mm(dA[0], dB[1]), self._mm(dA[1], dB[0]), self._mm(dA[1], dB[1])]
            else:  # [hi, lo, s]: hi*hi', lo*lo', s*s'
                C = [self._mm(dA[0], dB[0]), self._mm(dA[1], dB[1]), self._mm(dA[2], dB[2])]
            outs.append(fp8_combine(C, table, mi))
        return torch.stack(outs)

    def modular_matmul_digits(self, digA_L3MK, digB_L3NK, table):
        """Digit products for the fused path: FP32 [L, 3, M, N], recombined inside the CRT kernel.

        Args:
            digA_L3MK: float8_e4m3fn (or int8) [L, 3, M, K] digit planes of A
                (``scale_residues_triton(..., digits=True)``).
            digB_L3NK: same for B^T, [L, 3, N, K].
            table: an fp8 moduli table.

        Returns:
            float32 [L, 3, M, N]: square moduli (hi lo', lo hi', lo lo'), Karatsuba (hi hi', lo lo', s s'),
            each an exact integer (K * 256 < 2**24 required).

        Raises:
            InputError: K too large for exact FP32 chunk sums.
        """
        L, _, M, K = digA_L3MK.shape
        N = digB_L3NK.shape[2]
        if K * FP8_MAX_DIGIT**2 >= 2**24:
            raise InputError(f"K={K}: FP32 digit sums would exceed 2**24; use modular_matmul")
        A8 = digA_L3MK if digA_L3MK.dtype == torch.float8_e4m3fn else self.to_fp8(digA_L3MK)
        B8 = digB_L3NK if digB_L3NK.dtype == torch.float8_e4m3fn else self.to_fp8(digB_L3NK)
        out = torch.empty((L, 3, M, N), dtype=torch.float32, device=digA_L3MK.device)
        for mi in range(L):
            pairs = ((0, 1), (1, 0), (1, 1)) if table.square_root(mi) is not None else ((0, 0), (1, 1), (2, 2))
            for d, (i, j) in enumerate(pairs):
                self._mm_f32(A8[mi, i], B8[mi, j], out[mi, d])
        return out

    def _mm_f32(self, A_MK, B_NK, out_MN):
        """out = A @ B.T in exact FP32 (chunks of K summed in FP32; K * 256 < 2**24)."""
        M, K = A_MK.shape
        N = B_NK.shape[0]
        Mp, Np = _round_up(max(M, 16), 16), _round_up(max(N, 16), 16)
        one = torch.ones((), dtype=torch.float32, device=A_MK.device)
        for c, k0 in enumerate(range(0, max(K, 1), self.k_chunk)):
            a = A_MK[:, k0:k0 + self.k_chunk]
            b = B_NK[:, k0:k0 + self.k_chunk]
            Kp = _round_up(max(a.shape[1], 16), 16)
            a = _pad_to(a, Mp, Kp).contiguous()
            b = _pad_to(b, Np, Kp).contiguous()
            if c == 0 and (Mp, Np) == (M, N):
                torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                                 use_fast_accum=False, out=out_MN)
                continue
            r = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                                 use_fast_accum=False)[:M, :N]
            if c == 0:
                out_MN.copy_(r)
            else:
                out_MN.add_(r)
        return out_MN

    def bound_matmul(self, hiA_MK, hiB_NK):
        """Exact hiA @ hiB.T with entries <= 16 in FP8 (same K chunking)."""
        return self._mm(self.to_fp8(hiA_MK.to(torch.int8)), self.to_fp8(hiB_NK.to(torch.int8)))

    def reconstruct(self, res_LMN, s_M, t_N, table):
        """Triton CRT on CUDA, int64-limb CRT elsewhere (bit-identical)."""
        return _fast_reconstruct(res_LMN, s_M, t_N, table, self.kernels)


BACKENDS = {"cpu-exact": CpuExactBackend, "int8": Int8Backend, "fp8": Fp8Backend}
"""Registry: backend name -> class."""


def get_backend(backend) -> object:
    """Resolve a backend name or instance to a :class:`~gpufield.fp64.protocols.ModularBackend`.

    Raises:
        InputError: unknown backend name.
    """
    if isinstance(backend, str):
        if backend not in BACKENDS:
            raise InputError(f"unknown Ozaki backend {backend!r}; expected one of {sorted(BACKENDS)}")
        return BACKENDS[backend]()
    return backend
