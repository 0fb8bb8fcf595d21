#!/usr/bin/env bash
# The main job: installs what is missing, builds the rewind program, and runs `rewind demo`, which
# reproduces the measurements at sizes that finish in a few minutes and writes report/.
# Extra arguments go to the program instead (for example: ./demo.sh explain --mu 0.6).
set -euo pipefail
cd "$(dirname "$0")"
scripts/build.sh rewind_cli >/dev/null
if [ $# -gt 0 ]; then exec build/bin/rewind "$@"; fi
exec build/bin/rewind demo --out report
