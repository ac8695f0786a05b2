"""Serialise every GPM call of ProbeSampler under one lock (run 72b: SIGSEGV in nvmlGpmMetricsGet while the main
thread took a GPM snapshot and the sampler thread computed metrics)."""
import sys
p = sys.argv[1]
s = open(p).read()
assert "_gpm_lock" not in s
s = s.replace("        self._lock = threading.Lock()\n", "        self._lock = threading.Lock()\n        self._gpm_lock = threading.RLock()  # GPM calls from two threads at once crashed NVML (run 72b)\n", 1)
for name in ("gpm_snapshot", "gpm_free", "gpm_metrics"):
    a = s.index(f"    def {name}(")
    b = s.index('"""', s.index('"""', a) + 3) + 3  # end of docstring
    nl = s.index("\n", b) + 1
    end = s.index("\n    def ", nl)
    body = s[nl:end]
    body = "".join(("    " + ln if ln.strip() else ln) for ln in body.splitlines(True))
    s = s[:nl] + "        with self._gpm_lock:\n" + body + s[end:]
open(p, "w").write(s)
