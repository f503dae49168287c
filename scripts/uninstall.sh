#!/bin/sh
# Removes what scripts/install.sh installed: stops and disables the service, removes the
# unit and the binary. The config (/etc/pgo-agent), the profiles (/var/lib/pgo-agent) and
# the user are kept unless --purge is given.
#
#   scripts/uninstall.sh [--prefix DIR] [--purge]
#
# DESTDIR=/some/root removes staged files only (no systemctl, no userdel).
set -eu

prefix=/usr/local
purge=no
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --purge) purge=yes; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "uninstall.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
destdir=${DESTDIR:-}
user=pgo-agent

if [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
    echo "uninstall.sh: run as root (or set DESTDIR)" >&2
    exit 1
fi
if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
    systemctl disable --now pgo-agent.service 2>/dev/null || true
fi
rm -f "$destdir/etc/systemd/system/pgo-agent.service" "$destdir$prefix/bin/pgo-agent"
if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
if [ "$purge" = yes ]; then
    rm -rf "$destdir/etc/pgo-agent" "$destdir/var/lib/pgo-agent"
    if [ -z "$destdir" ] && getent passwd "$user" >/dev/null; then
        userdel "$user"
    fi
    echo "uninstall.sh: removed pgo-agent, its config, its profiles and its user"
else
    echo "uninstall.sh: removed pgo-agent; kept /etc/pgo-agent and /var/lib/pgo-agent (--purge removes them)"
fi
