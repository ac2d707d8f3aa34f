#!/usr/bin/env bash
# The public API of the published library crates, as docs.rs will show it:
# scripts/lib/packed.sh documents each packed crate with its docs.rs
# metadata, as HTML and as rustdoc JSON, and scripts/lib/public_api.py lists
# every public item by the path users write (signatures, fields, variants,
# trait impls, auto traits). `check` (part of packed.sh, which check.sh
# runs) compares it with the committed api/public-api.txt, so that a change
# to the surface is made on purpose; `update` rewrites the file after such a
# change (and the change belongs in CHANGELOG.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-check}" in
update) bash scripts/lib/packed.sh api-update ;;
check) bash scripts/lib/packed.sh ;;
*) echo "usage: $0 [check|update]" >&2; exit 2 ;;
esac
