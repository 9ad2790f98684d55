#!/bin/sh
# Runs inside the debootstrapped rootfs (chroot) after the packages are
# installed: the account and settings that make it look like E2B's base
# template. Part of the recipe hash.
set -eu

# The unprivileged account sandboxes run as: uid/gid 1000, home /home/user,
# bash as login shell, passwordless sudo.
groupadd --gid 1000 user
useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
usermod -aG sudo user
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >/etc/sudoers.d/user
chmod 0440 /etc/sudoers.d/user

# pip refuses to install into the system Python on bookworm (PEP 668) unless
# told otherwise; E2B's template lets `pip install` work, so allow it.
printf '[global]\nbreak-system-packages = true\n' >/etc/pip.conf

# apt inside the sandbox talks to Debian's own mirror.
printf 'deb http://deb.debian.org/debian bookworm main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' >/etc/apt/sources.list

# Smaller image: no package caches or lists, no docs.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/info/*
: >/etc/machine-id
