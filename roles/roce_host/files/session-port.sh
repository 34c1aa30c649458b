#!/bin/bash
# What carries address $1 on this host: "nvidia" when it sits on a port of the mlx5_core
# driver, directly or through a bond, VLAN or bridge over one (an openibd restart unloads
# that driver and the port goes away with this session); "other" when it does not;
# "unknown" when no interface here holds it (a host name, or an address NAT puts in front).
# ROCE_SYSFS: another sysfs root, for the tests (as the QoS script reads it).
set -u
sys=${ROCE_SYSFS:-/sys}
dev=$(ip -o addr show | awk -v a="$1" '{split($4, p, "/"); if (p[1] == a) {print $2; exit}}')
[ -n "$dev" ] || { echo unknown; exit 0; }
# a VLAN's name in `ip -o` carries its lower device: eth0.100@eth0
dev=${dev%%@*}

# depth-first over the lower devices (bond slaves, a VLAN's real device, bridge ports)
walk() {
  local d=$1 depth=$2 lower driver
  [ "$depth" -lt 8 ] || return 1
  driver=$(readlink "$sys/class/net/$d/device/driver" 2>/dev/null)
  [ "${driver##*/}" = mlx5_core ] && return 0
  for lower in "$sys/class/net/$d"/lower_*; do
    [ -e "$lower" ] || [ -L "$lower" ] || continue
    walk "${lower##*/lower_}" $((depth + 1)) && return 0
  done
  return 1
}
if walk "$dev" 0; then echo nvidia; else echo other; fi
