import csv, collections, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]; data = [r for r in rows[2:] if len(r) == len(hdr)]
ix = {h: i for i, h in enumerate(hdr)}
def f(r, k):
    try: return float(r[ix[k]] or 0)
    except: return 0.0
stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = sum(f(r, "Warp Stall Sampling (All Samples)") for r in data)
print("instructions", len(data), "samples", tot)
# phases: split at first IGMMA and last IGMMA
ig = [i for i, r in enumerate(data) if "GMMA" in r[ix["Source"]]]
print("gmma at", ig[:3], "...", ig[-3:])
bounds = [("prologue", 0, ig[0]), ("loop", ig[0], ig[-1] + 1), ("after last gmma", ig[-1] + 1, len(data))]
# find finish start: first FLOOR/FRND after last gmma
for name, a, b in bounds:
    seg = data[a:b]
    s = sum(f(r, "Warp Stall Sampling (All Samples)") for r in seg)
    ex = sum(f(r, "Instructions Executed") for r in seg)
    st = collections.Counter()
    for r in seg:
        for k in stalls: st[k] += f(r, k)
    print(f"{name}: instr {b-a}, executed {ex:.3g}, samples {s:.0f} ({100*s/tot:.1f}%)", ", ".join(f"{k[6:]} {100*v/s:.0f}%" for k, v in st.most_common(7)))
# opcode class totals
op = collections.Counter(); ops_s = collections.Counter()
for r in data:
    o = r[ix["Source"]].strip().split()
    o = [t for t in o if not t.startswith("@")]
    name = o[0].split(".")[0] if o else "?"
    op[name] += f(r, "Instructions Executed"); ops_s[name] += f(r, "Warp Stall Sampling (All Samples)")
print("by opcode: samples% (executed)")
for k, v in ops_s.most_common(18): print(f"  {k:12s} {100*v/tot:5.1f}%  {op[k]:.3g}")
# top 25 instructions by samples with stall breakdown
print("top instructions")
for i, r in sorted(enumerate(data), key=lambda t: -f(t[1], "Warp Stall Sampling (All Samples)"))[:25]:
    s = f(r, "Warp Stall Sampling (All Samples)")
    st = sorted(((f(r, k), k[6:]) for k in stalls), reverse=True)[:3]
    print(f"  {i:5d} {s:6.0f} {r[ix['Source']][:60]:60s}", " ".join(f"{k}:{v:.0f}" for v, k in st))
print("prologue by opcode (executed, samples%)")
op = collections.Counter(); ops_s = collections.Counter()
for r in data[:ig[0]]:
    o = [t for t in r[ix["Source"]].strip().split() if not t.startswith("@")]
    name = o[0] if o else "?"
    op[name] += f(r, "Instructions Executed"); ops_s[name] += f(r, "Warp Stall Sampling (All Samples)")
for k, v in op.most_common(30): print(f"  {k:22s} exec {v/ (8*2**20/ (64*8*32/256)) :8.1f}/thread-tile?  samples {100*ops_s[k]/tot:5.1f}%")
