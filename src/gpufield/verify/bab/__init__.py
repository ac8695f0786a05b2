"""Complete verification by β-CROWN branch and bound over ReLU splits (see :mod:`.search`)."""

from gpufield.verify.bab.branch import BRANCHING
from gpufield.verify.bab.search import BabResult, Domain, bab

__all__ = ["BRANCHING", "BabResult", "Domain", "bab"]
