#!/usr/bin/env bash
# bench/sim/domains.sh: issue 38's simulator figures (docs/failure-domains.md),
# one line per run. 100,000 GPUs x 365 days (store-less regroups) and 9,600
# x 90 (as built), seeds 1-5, correlated faults (racks of 2, switch faults,
# infant mortality), domain-aware against domain-blind placement on the same
# fault trace; checkups on (the default). Each line: both arms' progress /
# worst hour / longest unproductive stretch, the switch faults and what
# came back, the checkups, whether the run stopped or had events refused,
# and the wall and CPU of the run (both arms, two threads) with the load
# average before it. Figures only, never an assertion. Extra flags go to
# every `bulwark sim` (e.g. --no-checkup); SEEDS="1 2" runs fewer seeds.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIM=build/bin/bulwark
TIME_OUT=$(mktemp)
trap 'rm -f "$TIME_OUT"' EXIT
echo "# $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo '+local changes'), $(date -u +%FT%TZ)"
for run in "100000 365 --rendezvous neighbours" "9600 90"; do
  read -r gpus days rest <<<"$run"
  for seed in ${SEEDS:-1 2 3 4 5}; do
    for placement in aware blind; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      # shellcheck disable=SC2086
      /usr/bin/time -f '%e s wall %U+%S cpu' -o "$TIME_OUT" $SIM sim --gpus "$gpus" --days "$days" --seed "$seed" \
        --correlated --placement "$placement" $rest --json "$@" |
        GPUS=$gpus DAYS=$days SEED=$seed PLACEMENT=$placement python3 -c "
import json, os, sys
r = json.load(sys.stdin)
f, d, k = r['fleet'], r['fleet']['domains'], r['fleet']['checkups']
arm = lambda a: '%.3f%% / %.2f%% / %.1f min' % (100*a['ettr_by_steps'], 100*a['window_min_ettr'], a['longest_unproductive_s']/60)
arms = {a['name']: arm(a) for a in r['arms'] if a['name'].startswith('bulwark')}
print('%s x %s seed %s %s: elastic %s; whole-world %s; switch faults %d (%d machines, %d replica-hits, %d back, %d kept out, '
      '%d cut off in a checkup); checkups %s: %d checked, %d back, %d kept; over-evicted on suspicion back %d after %.0f s '
      'mean, %.0f s max; healthy machine-days out %.0f; stopped %s; refused %d' % (
    os.environ['GPUS'], os.environ['DAYS'], os.environ['SEED'], os.environ['PLACEMENT'],
    arms.get('bulwark elastic', '-'), arms.get('bulwark whole-world', '-'), d['switch_faults'], d['switch_machines_lost'],
    d['switch_replicas_hit'], d['switch_returned'], d['switch_kept_out'], d.get('switch_checkups_cut', 0),
    'on' if k['on'] else 'off', k['checked'], k['returned'], k['kept_out'], k.get('suspect_returned', 0),
    k.get('suspect_return_mean_s', 0), k.get('suspect_return_max_s', 0), f['healthy_out_days'], f['stopped'], f['refused']))"
      echo "    $(cat "$TIME_OUT"), loadavg before $load"
    done
  done
done
