#!/usr/bin/env bash
# Makes preview hosts (<id>-<port>.localhost) resolvable for every program on
# this machine, not only for browsers that special-case *.localhost: Debian's
# libnss-myhostname resolves localhost and *.localhost to the loopback
# addresses through glibc, which curl, Node, Python and most tools use.
# Its package adds "myhostname" to the hosts line of /etc/nsswitch.conf.
set -euo pipefail
if ! dpkg-query -W -f='${Status}' libnss-myhostname 2>/dev/null | grep -q 'install ok installed'; then
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnss-myhostname >/dev/null
fi
if ! grep -Eq '^hosts:.*\bmyhostname\b' /etc/nsswitch.conf; then
	sed -i -E 's/^(hosts:[[:space:]]+files)/\1 myhostname/' /etc/nsswitch.conf
fi
getent ahosts sandpit-probe.localhost >/dev/null || { echo "ensure-names: *.localhost still does not resolve (see /etc/nsswitch.conf)" >&2; exit 1; }
