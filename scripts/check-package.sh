#!/usr/bin/env bash
# Checks a built tether .deb: its files, its conffile, its unit, lintian, and that the packaged
# binary accepts the packaged config. Usage: check-package.sh tether_<version>_amd64.deb
set -euo pipefail
deb="$1"
fail() {
  echo "check-package: $*" >&2
  exit 1
}
listing="$(dpkg-deb -c "$deb" | awk '{print $6}')"
for path in ./usr/bin/tether ./usr/bin/tether-mock ./etc/tether/tether.toml \
  ./usr/lib/systemd/system/tether.service ./usr/share/doc/tether/copyright \
  ./usr/share/doc/tether/changelog.gz ./usr/share/man/man1/tether.1.gz; do
  grep -qx "$path" <<<"$listing" || fail "$deb lacks $path"
done
[ "$(dpkg-deb -f "$deb" Package)" = tether ] || fail "package name is not tether"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
dpkg-deb -R "$deb" "$root"
grep -qx /etc/tether/tether.toml "$root/DEBIAN/conffiles" || fail "the config is not a conffile"
unit="$root/usr/lib/systemd/system/tether.service"
for line in "ExecStart=/usr/bin/tether --config /etc/tether/tether.toml" "Restart=on-failure" \
  "DynamicUser=yes" "StateDirectory=tether" "LimitNOFILE=65536" \
  'ExecReload=/bin/kill -HUP $MAINPID'; do
  grep -qxF "$line" "$unit" || fail "the unit lacks '$line'"
done
"$root/usr/bin/tether" check --config "$root/etc/tether/tether.toml" >/dev/null ||
  fail "the packaged tether rejects the packaged config"
# The service may write only its StateDirectory: the ledger must be there.
grep -qx 'path = "/var/lib/tether/tether-ledger.db"' "$root/etc/tether/tether.toml" ||
  fail "the packaged config's ledger is not in the service's StateDirectory"
"$root/usr/bin/tether" --version

# The maintainer address is the publisher's to set (TETHER_PACKAGE_MAINTAINER); every other tag
# fails the check.
lintian --fail-on error,warning --suppress-tags bogus-mail-host,bogus-mail-host-in-debian-changelog \
  "$deb"
echo "check-package: $deb is complete and lintian-clean"
