#!/bin/bash
# Whether this SSH session rides on a port an openibd restart takes away: "nvidia" when
# the interface that holds address $1 (the node's address in the inventory), or the one its
# packets to the controller leave by (SSH_CONNECTION's client address; an address on a
# loopback or dummy interface, as on routed fabrics, leaves by another), is a port of the
# mlx5_core driver, directly or through a bond, VLAN or bridge over one; "other" when
# neither is; "unknown" when no interface here holds $1 (a host name, or an address NAT
# puts in front). ROCE_SYSFS: another sysfs root, for the tests (as the QoS script reads).
set -u
sys=${ROCE_SYSFS:-/sys}
holder=$(ip -o addr show | awk -v a="$1" '{split($4, p, "/"); if (p[1] == a) {print $2; exit}}')
[ -n "$holder" ] || { echo unknown; exit 0; }
client=${SSH_CONNECTION:-}
client=${client%% *}
egress=""
if [ -n "$client" ]; then
  egress=$(ip route get "$client" 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
fi

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
for dev in "$holder" $egress; do
  walk "$dev" 0 && { echo nvidia; exit 0; }
done
echo other
