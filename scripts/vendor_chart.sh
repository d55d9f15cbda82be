#!/usr/bin/env bash
# Refresh the dashboard's vendored Chart.js (dashboard/static/dashboard/vendor/VENDORED.md):
# `scripts/vendor_chart.sh 4.6.1`. Packs the exact version from the npm registry in a temp
# dir, checks the tarball against the registry's integrity, copies the UMD build (unchanged)
# and the license, and prints the sha256 sums to record in VENDORED.md.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/vendor_chart.sh <chart.js version, e.g. 4.6.1>}
vendor=dashboard/static/dashboard/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "chart.js@$version" >/dev/null)
tarball="$work/chart.js-$version.tgz"
# npm pack checks the download already; compare with the registry's record all the same.
expected=$(npm view "chart.js@$version" dist.integrity)
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
[ "$expected" = "$actual" ] || { echo "integrity mismatch: $actual != $expected" >&2; exit 1; }
tar -xzf "$tarball" -C "$work"
rm -f "$vendor"/chart-*.umd.min.js
cp "$work/package/dist/chart.umd.min.js" "$vendor/chart-$version.umd.min.js"
cp "$work/package/LICENSE.md" "$vendor/chart.js-LICENSE.md"
echo "tarball  https://registry.npmjs.org/chart.js/-/chart.js-$version.tgz"
echo "integrity $expected"
echo "tarball sha256 $(sha256sum "$tarball" | cut -d' ' -f1)"
echo "file sha256    $(sha256sum "$vendor/chart-$version.umd.min.js" | cut -d' ' -f1)"
echo "Now update VENDORED.md (version, sums) and the script tag in templates/dashboard/charts.html."
