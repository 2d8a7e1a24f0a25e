#!/usr/bin/env bash
# bench/sim: the scale simulator's figures. The goal run (9,600 GPUs, 90
# days, Llama 3 fault mix) with its baselines, the speed targets (3 months x
# 10k GPUs, a year x 100k GPUs), the demo replay, then the three sweeps.
# Figures only, never an assertion. Extra flags go to every `bulwark sim`.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIM="build/bin/bulwark sim"
echo "== 9,600 GPUs, 90 days (the goal run)"
$SIM --gpus 9600 --days 90 "$@"
echo
echo "== speed: 10,000 GPUs x 90 days; 100,000 GPUs x 365 days"
for run in "10000 90 1" "100000 365 2"; do
  read -r gpus days seed <<<"$run"
  /usr/bin/time -f "   peak RSS %M KiB, wall %e s" $SIM --gpus "$gpus" --days "$days" --seed "$seed" --json |
    python3 -c "import json,sys; r=json.load(sys.stdin); s=r['speed']; b=r['arms'][0]; c=r['config']; print('   %d GPUs x %.0f days: ETTR %.2f%%, %d events in %.3f s = %.0f events/s' % (c['gpus'], c['days'], 100*b['ettr'], r['fleet']['events'], s['cpu_s'], s['events_per_s']))"
done
echo
echo "== 100,000 GPUs x 365 days (docs/simulator.md): elastic pipeline replicas beside the whole-world restart,"
echo "   the regroup priced store-less (neighbours: plans in the start command, the default), then through the store"
for rendezvous in neighbours store; do
  for seed in 1 2 3 4 5; do
    /usr/bin/time -f "%e" -o /tmp/bulwark-sim-wall.$$ $SIM --gpus 100000 --days 365 --seed "$seed" --rendezvous "$rendezvous" --json |
      python3 -c "
import json, sys
r = json.load(sys.stdin)
arms = ['%s: progress %.3f%%, worst 1 h %.2f%%, longest %.1f min' % (a['name'], 100*a['ettr_by_steps'], 100*a['window_min_ettr'], a['longest_unproductive_s']/60)
        for a in r['arms'] if a['name'].startswith('bulwark')]
print('   $rendezvous seed $seed (pp %d): %s; same trace %s' % (r['config']['pp'], '; '.join(arms), r['whole_world_fleet']['same_trace']))"
    echo "      wall $(cat /tmp/bulwark-sim-wall.$$) s, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
rm -f /tmp/bulwark-sim-wall.$$
echo
echo "== the demo's schedule replayed (measured: ETTR 80.1%, docs/demo.md)"
$SIM --replay demo | sed -n 3,7p
for sweep in scale standby ckpt detect; do
  echo
  echo "== sweep $sweep"
  $SIM --sweep "$sweep"
done
