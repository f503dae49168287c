#!/bin/sh
# Installs pgo-agent as a systemd service: the binary, the unit, the default config and
# the dedicated system user. Run as root from the repository after
# `cargo build --release -p daemon`.
#
#   scripts/install.sh [--binary PATH] [--prefix DIR] [--no-start]
#
# DESTDIR=/some/root stages the files there and skips creating the user and calling
# systemctl (packaging, tests). An existing /etc/pgo-agent/pgo-agent.toml is kept.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
binary="$repo/target/release/pgo-agent"
prefix=/usr/local
start=yes
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --prefix) prefix=$2; shift 2 ;;
        --no-start) start=no; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
destdir=${DESTDIR:-}
user=pgo-agent

[ -x "$binary" ] || { echo "install.sh: no executable $binary (cargo build --release -p daemon)" >&2; exit 1; }
if [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: run as root (or set DESTDIR to stage the files)" >&2
    exit 1
fi

install -d -m 0755 "$destdir$prefix/bin" "$destdir/etc/systemd/system" "$destdir/etc/pgo-agent"
install -m 0755 "$binary" "$destdir$prefix/bin/pgo-agent"
sed "s#^ExecStart=/usr/local/bin/pgo-agent #ExecStart=$prefix/bin/pgo-agent #" \
    "$repo/systemd/pgo-agent.service" > "$destdir/etc/systemd/system/pgo-agent.service"
chmod 0644 "$destdir/etc/systemd/system/pgo-agent.service"
if [ -e "$destdir/etc/pgo-agent/pgo-agent.toml" ]; then
    echo "install.sh: keeping the existing /etc/pgo-agent/pgo-agent.toml"
else
    install -m 0644 "$repo/systemd/pgo-agent.toml" "$destdir/etc/pgo-agent/pgo-agent.toml"
fi

if [ -n "$destdir" ]; then
    echo "install.sh: staged in $destdir (no user created, systemd not told)"
    exit 0
fi

if ! getent passwd "$user" >/dev/null; then
    useradd --system --user-group --no-create-home --home-dir /var/lib/pgo-agent \
        --shell /usr/sbin/nologin --comment "pgo-agent profile collector" "$user"
    echo "install.sh: created system user $user"
fi

if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    if [ "$start" = yes ]; then
        systemctl enable --now pgo-agent.service
        systemctl --no-pager --lines=5 status pgo-agent.service || true
    else
        systemctl enable pgo-agent.service
    fi
else
    echo "install.sh: systemd is not running here; start pgo-agent.service on the target host"
fi
echo "install.sh: installed $prefix/bin/pgo-agent, /etc/systemd/system/pgo-agent.service, /etc/pgo-agent/pgo-agent.toml"
