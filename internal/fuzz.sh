#!/usr/bin/env bash
# fuzz.sh: `make fuzz`. Runs every fuzz target of the module for FUZZTIME (default 10s) each. A target fails the
# run when it finds an input (written to its package's testdata/fuzz, where `go test` replays it from then on).
# A bare "context deadline exceeded" at the end of the time, with no input written, is Go 1.26's fuzzing
# coordinator racing its own deadline (golang/go#75804, fixed in Go 1.27), not a finding: it is reported and
# the run goes on.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
failed=0 races=0
for pkg in $($GO list ./...); do
	for f in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $f ($FUZZTIME)"
		out=$($GO test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1)
		rc=$?
		grep -v '^fuzz: elapsed' <<<"$out"
		if ((rc != 0)); then
			if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
				echo "   (no input found: the Go fuzzing coordinator's deadline race, golang/go#75804)"
				races=$((races + 1))
			else
				failed=$((failed + 1))
			fi
		fi
	done
done
echo "fuzz: $failed target(s) failed, $races deadline race(s) ignored"
((failed == 0))
