"""Quick interleaved A/B of the bf16 figures only: bulwark-train bf16 at 2 and 1 threads against
reference.py under autocast at 2 and 1 threads (OMP_WAIT_POLICY=PASSIVE), 3 rounds of 10 timed steps.
Run from the repository root: /usr/bin/python3 bench/trainer_throughput/ab_bf16.py [DATA]
"""
import sys, json, statistics, subprocess, os
sys.path.insert(0, "bench/trainer_throughput")
import run as R
data = sys.argv[1] if len(sys.argv) > 1 else "data/kjv"
steps, warm = 10, 2
res={k:[] for k in ("bw16_2t","bw16_1t","py16_2t","py16_1t")}
for r in range(3):
    res["bw16_2t"] += R.bulwark(data, steps, warm, "bf16", 2)[0]
    res["py16_2t"] += R.python(data, steps, warm, 2, True)
    res["bw16_1t"] += R.bulwark(data, steps, warm, "bf16", 1)[0]
    res["py16_1t"] += R.python(data, steps, warm, 1, True)
    print(r, {k: round(statistics.median(v)) for k,v in res.items()}, os.getloadavg()[0], flush=True)
