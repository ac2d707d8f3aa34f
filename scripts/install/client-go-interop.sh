#!/usr/bin/env bash
# Builds integration/go/client-go-elector (client-go's tools/leaderelection
# with a LeaseLock, used by the Kubernetes interop tests and benchmarks) into
# ${FENCING_CACHE:-$HOME/.cache/fencing}/bin/client-go-elector, or reuses it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/go-program.sh
build_go_program client-go-interop integration/go/client-go-elector client-go-elector
