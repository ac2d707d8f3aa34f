#!/usr/bin/env bash
# Builds integration/anchors/go/client-go-elector (client-go's
# tools/leaderelection with a LeaseLock, used by the Kubernetes interop tests
# and benchmarks) into bin/client-go-elector of the fencing cache
# (${FENCING_CACHE:-$HOME/.cache/fencing}), or reuses it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/go-program.sh
build_go_program client-go-interop integration/anchors/go/client-go-elector client-go-elector
