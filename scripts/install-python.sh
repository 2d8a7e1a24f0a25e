#!/usr/bin/env bash
# The Python environment of the client, its tests and examples: a virtual
# environment with python/requirements.txt (torch 2.15.0, exact pins),
# made once per machine OUTSIDE the clone and linked as the clone's .venv,
# so that scripts, tests and users name one path: .venv/bin/python.
#
#   ROOT/KEY/          the environment (ROOT: $BULWARK_VENV_ROOT, else
#                      /opt/bulwark/venv as root, else ~/.cache/bulwark/venv)
#   ROOT/KEY/.bulwark-complete   written last: the environment is whole
#   .venv -> ROOT/KEY  in the clone (ignored by git)
#
# KEY is a hash of the requirements file, the base interpreter's version and
# the architecture: another pin gets another environment, never an old one
# upgraded in place, and every clone on the machine (CI's fresh ones
# included) reuses the one that matches. Idempotent: with the environment
# complete this only checks the marker and the link (a few milliseconds).
# A first install downloads about 3 GB and takes 5.4 GB (torch's wheel
# brings CUDA's libraries): 1 min 52 s on this project's 2-core machines.
#
# The base interpreter is Debian's /usr/bin/python3 (python3-venv installs
# its venv support; scripts/install-deps.sh lists it); BULWARK_BASE_PYTHON
# names another. Called at the end of scripts/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

req=python/requirements.txt
base=${BULWARK_BASE_PYTHON:-/usr/bin/python3}
if [[ -n "${BULWARK_VENV_ROOT:-}" ]]; then
  root=$BULWARK_VENV_ROOT
elif [[ $(id -u) -eq 0 ]]; then
  root=/opt/bulwark/venv
else
  root=${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/venv
fi

die() {
  echo "install-python: $*" >&2
  exit 1
}

[[ -x "$base" ]] || die "no base interpreter $base (install Debian's python3, or set BULWARK_BASE_PYTHON)"
version=$("$base" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') ||
  die "$base does not run"
key=$( { cat "$req"; echo "python $version $(uname -m)"; } | sha256sum | cut -c1-16)
env=$root/$key
marker=$env/.bulwark-complete

# The clone's link; a .venv of the user's own (a real directory) is theirs.
link() {
  if [[ -d .venv && ! -L .venv ]]; then
    echo "install-python: .venv is a directory of its own, left as it is; the tests run its bin/python" \
         "(remove it to use $env)" >&2
    return 0
  fi
  ln -sfn "$env" .venv
}

if [[ -f "$marker" ]]; then
  link
  exit 0
fi

"$base" -c 'import ensurepip, venv' 2>/dev/null ||
  die "$base has no venv support (Debian: apt-get install python3-venv; scripts/install-deps.sh does)"
mkdir -p "$root" || die "cannot create $root (run as root, or set BULWARK_VENV_ROOT to a directory of yours)"

# One installer at a time per machine: two clones' first `make test` at once
# wait for one environment instead of writing the same one twice.
exec 9>"$root/.lock"
flock 9
if [[ ! -f "$marker" ]]; then
  # A directory without the marker is an install that died midway: start over.
  # Built in place, not renamed into place: a venv's scripts name its path.
  rm -rf "$env"
  echo "install-python: making $env (torch 2.15.0 and the test packages, about 2 min and 5.4 GB the first time)"
  start=$(date +%s)
  "$base" -m venv "$env" || die "$base -m venv $env failed"
  "$env/bin/python" -m pip install --quiet --no-input --disable-pip-version-check -r "$req" ||
    die "pip could not install $req into $env (is PyPI reachable?); to run the tests on a python of your own," \
        "configure with -DBULWARK_TORCH_PYTHON=/path/to/python"
  "$env/bin/python" -c 'import torch, numpy, xxhash, torch.distributed' ||
    die "$env/bin/python cannot import what it just installed"
  versions=$("$env/bin/python" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')
  printf 'key %s\npython %s\n%s\ninstall_s %d\n' "$key" "$version" "$versions" $(($(date +%s) - start)) >"$marker.tmp"
  mv "$marker.tmp" "$marker"
  echo "install-python: $env ready in $(($(date +%s) - start)) s ($versions)"
fi
flock -u 9
link
