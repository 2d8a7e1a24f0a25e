#!/usr/bin/env python3
"""No include runs up the house: each folder of src/ may include only the
folders on a floor below its own (and itself), as LAYERS says, so the tree
shows the architecture and the control plane never reaches the trainer.
A folder that LAYERS does not name is a problem too: put it on a floor.

usage: check_layers.py REPO_ROOT
Prints one line per include that goes up or sideways (file:line, what it
includes, the floors, and the fix) and exits 1 when there is any.
"""
import os
import re
import sys

# Floors, lowest first. A folder includes its own floor's folders only
# where SIDEWAYS says so: two on one floor are independent parts.
LAYERS = [
    ["common"],                                     # ids, status, files, clocks' types, logging
    ["cluster", "controller", "rank_client"],       # backends' layout; the pure policy; a rank's side
    ["agent", "plane", "sim", "trainer", "control_client"],  # the processes, and the controller's client
    ["demo"],                                       # scenarios on a local cluster
    ["cli"],                                        # the bulwark binary: everything
]
SIDEWAYS = set()
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def floor_of():
    return {folder: n for n, floor in enumerate(LAYERS) for folder in floor}


def check(root):
    floors = floor_of()
    src = os.path.join(root, "src")
    problems = []
    for folder in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, folder)):
            continue
        if folder not in floors:
            problems.append("src/%s is on no floor of tests/house/check_layers.py's LAYERS: put it on one" % folder)
            continue
        for dirpath, _, files in os.walk(os.path.join(src, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".in")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="ignore") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE_RE.match(line)
                        # Generated protocol headers (proto/etcd/...) are not src/.
                        if not m or m.group(1) == folder or not os.path.isdir(os.path.join(src, m.group(1))):
                            continue
                        to = m.group(1)
                        if to not in floors:
                            continue  # reported once, as a folder on no floor
                        up = floors[to] > floors[folder]
                        side = floors[to] == floors[folder] and (folder, to) not in SIDEWAYS
                        if up or side:
                            problems.append("%s:%d: src/%s (floor %d) includes src/%s (floor %d): %s" % (
                                rel, n, folder, floors[folder], to, floors[to],
                                "move what both need down a floor" if side else
                                "invert it (an interface below, its implementation above) or move the piece down"))
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    print("check_layers: %d include(s) up or sideways" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
