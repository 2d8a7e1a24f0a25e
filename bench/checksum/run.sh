#!/usr/bin/env bash
# bench/checksum: the hand-written Checksum64 against xxHash's XXH3 on a
# shard-sized buffer (27 MB: one rank's image of the small model with AdamW),
# hashed alone and copied-and-hashed in 128 KiB blocks as the shard writer
# does. Figures only. Arguments: [MB] [repetitions].
set -euo pipefail
cd "$(dirname "$0")/../.."
exec build/bin/bulwark-checksum-bench "$@"
