"""Small float64 workloads written with plain torch ops, for :func:`gpufield.fp64.emulate` (tests, benchmarks).

Nothing here knows about emulation: run them inside ``with emulate(...)`` and their products are routed there.

* :func:`blocked_cholesky_solve`: right-looking blocked Cholesky (the trailing updates are DGEMMs
  A22 -= L21 @ L21^T), then two triangular solves;
* :func:`newton_schulz_inverse`: X_{k+1} = X_k (2 I - A X_k), two n x n DGEMMs per iteration;
* :func:`spd_test_matrix`: a random SPD matrix with a chosen 2-norm condition number.

Shape legend: n matrix side, nb block size, r right-hand sides.
"""

from __future__ import annotations

import torch


def spd_test_matrix(n: int, cond: float, *, seed: int = 0, device="cpu") -> torch.Tensor:
    """Q diag(lambda) Q^T with lambda log-spaced from 1 to ``cond`` (kappa_2 = cond) and Q random orthogonal.

    Args:
        n: side.
        cond: 2-norm condition number (>= 1).
        seed: generator seed.
        device: torch device.

    Returns:
        float64 [n, n], symmetric to the last bit.
    """
    g = torch.Generator(device="cpu").manual_seed(seed)
    G = torch.randn(n, n, dtype=torch.float64, generator=g).to(device)
    Q, _ = torch.linalg.qr(G)  # on the device (cuSOLVER on a GPU)
    lam = torch.logspace(0, float(torch.log10(torch.tensor(cond, dtype=torch.float64))), n, dtype=torch.float64,
                         device=Q.device)
    A = (Q * lam) @ Q.T
    return (A + A.T) / 2


def blocked_cholesky(A: torch.Tensor, nb: int = 256) -> torch.Tensor:
    """Lower Cholesky factor L (A = L L^T) by the right-looking blocked algorithm.

    Per block column k: L11 = chol(A11) (torch.linalg.cholesky), L21 = A21 L11^-T (triangular solve),
    A22 -= L21 @ L21^T: a (n - k - nb) x nb x (n - k - nb) DGEMM, the bulk of the flops.

    Args:
        A: float64 [n, n] symmetric positive definite (not modified).
        nb: block size.

    Returns:
        float64 [n, n] lower triangular L.
    """
    n = A.shape[0]
    W = A.clone()
    L = torch.zeros_like(W)
    for k in range(0, n, nb):
        e = min(k + nb, n)
        L11 = torch.linalg.cholesky(W[k:e, k:e])
        L[k:e, k:e] = L11
        if e < n:
            L21 = torch.linalg.solve_triangular(L11, W[e:, k:e].T, upper=False).T
            L[e:, k:e] = L21
            W[e:, e:] -= L21 @ L21.T
    return L


def blocked_cholesky_solve(A: torch.Tensor, b: torch.Tensor, nb: int = 256) -> torch.Tensor:
    """x with A x = b by :func:`blocked_cholesky` and two triangular solves.

    Args:
        A: float64 [n, n] SPD.
        b: float64 [n] or [n, r].
        nb: block size.

    Returns:
        float64 of b's shape.
    """
    L = blocked_cholesky(A, nb)
    B = b.unsqueeze(-1) if b.dim() == 1 else b
    y = torch.linalg.solve_triangular(L, B, upper=False)
    x = torch.linalg.solve_triangular(L.T, y, upper=True)
    return x.squeeze(-1) if b.dim() == 1 else x


def newton_schulz_inverse(A: torch.Tensor, iters: int = 30) -> torch.Tensor:
    """Inverse of a non-singular A by Newton-Schulz iteration from X_0 = A^T / (||A||_1 ||A||_inf).

    Converges quadratically once ||I - A X|| < 1 (about log2(kappa^2) + 5 iterations); every iteration is
    two n x n matrix products.

    Args:
        A: float64 [n, n].
        iters: iterations.

    Returns:
        float64 [n, n] approximate inverse.
    """
    n = A.shape[0]
    eye2 = 2 * torch.eye(n, dtype=A.dtype, device=A.device)
    X = A.T / (A.abs().sum(dim=0).max() * A.abs().sum(dim=1).max())
    for _ in range(iters):
        X = X @ (eye2 - A @ X)
    return X
