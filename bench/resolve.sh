#!/usr/bin/env bash
# Prints one resolution's cost for the largest AgentSpec a tenant can write (the CRD's pattern
# maxima over 10,000-tool servers), in three pattern shapes. Pure core only: no cluster.
#
#   bash bench/resolve.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo bench --quiet --bench resolve
