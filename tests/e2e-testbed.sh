#!/usr/bin/env bash
# The test bed's own end-to-end checks: up (timed), selftest, down.
# Summary line "N passed, M failed" comes from tests/testbed/selftest.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/testbed/up" || { echo "0 passed, 1 failed"; exit 1; }
"$here/testbed/selftest"; rc=$?
"$here/testbed/down" || rc=1
exit $rc
