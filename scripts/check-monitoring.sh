#!/usr/bin/env bash
# Checks the operator's files in docs/: the alerting rules load and each alert fires on its
# synthetic series (promtool), every dashboard query is valid PromQL, and every tether_* metric
# they name is one tether exports (actors/metrics.cpp).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

promtool check rules "$here/docs/prometheus/alerts.yml"
(cd "$here/docs/prometheus" && promtool test rules alerts_test.yml)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The dashboard's queries as recording rules, so that promtool parses each one.
python3 - "$here/docs/grafana/tether.json" "$work/dashboard_rules.yml" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
lines = ["groups:", "  - name: dashboard", "    rules:"]
n = 0
for panel in dash["panels"]:
    for target in panel.get("targets", []):  # a row has none
        expr = target["expr"].replace("$__rate_interval", "5m").replace("$instance", ".*")
        n += 1
        lines.append(f"      - record: dashboard:query_{n}")
        lines.append(f"        expr: {json.dumps(expr)}")
if n == 0:
    sys.exit("the dashboard has no queries")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
promtool check rules "$work/dashboard_rules.yml"

exported="$(grep -o 'header(out, "tether_[a-z_]*"' "$here/actors/metrics.cpp" | grep -o 'tether_[a-z_]*')"
named="$(grep -ho 'tether_[a-z_]*' "$here/docs/prometheus/alerts.yml" "$here/docs/grafana/tether.json" |
  sed -E 's/_(bucket|sum|count)$//' | sort -u)"
for metric in $named; do
  [ "$metric" = tether_gateway ] && continue  # the dashboard's uid, not a metric
  if ! grep -qx "$metric" <<<"$exported"; then
    echo "check-monitoring: $metric is named in docs/ but tether does not export it" >&2
    exit 1
  fi
done
echo "check-monitoring: rules, their tests and the dashboard's queries are valid"
