#!/bin/sh
# Chassis-control program for OpenIPMI's ipmi_sim, installed by `provision lab up`.
# ipmi_sim runs:  chassisctl.sh STATEDIR get PARM...       -> prints "PARM:VALUE" lines
#                 chassisctl.sh STATEDIR set PARM VALUE...  -> prints nothing on success
# PARM: power (0|1), reset, shutdown, boot (none|pxe|default|cdrom|bios), identify.
# The state is plain files in STATEDIR (power, boot, resets, history) so tests can read what
# the BMC was told.
dir=$1; op=$2; shift 2
mkdir -p "$dir"
case $op in
  get)
    for parm in "$@"; do
      case $parm in
        power) printf 'power:%s\n' "$(cat "$dir/power" 2>/dev/null || echo 0)" ;;
        boot) printf 'boot:%s\n' "$(cat "$dir/boot" 2>/dev/null || echo default)" ;;
        *) echo "Invalid parameter: $parm"; exit 1 ;;
      esac
    done ;;
  set)
    echo "$(date +%s.%N) set $*" >> "$dir/history"
    while [ $# -gt 0 ]; do
      parm=$1; value=$2
      case $parm in
        power) echo "$value" > "$dir/power" ;;
        reset) echo 1 > "$dir/power"; echo $(( $(cat "$dir/resets" 2>/dev/null || echo 0) + 1 )) > "$dir/resets" ;;
        shutdown) echo 0 > "$dir/power" ;;
        boot)
          case $value in
            none|pxe|default|cdrom|bios) echo "$value" > "$dir/boot" ;;
            *) echo "Invalid boot value: $value"; exit 1 ;;
          esac ;;
        identify) shift ;;  # identify takes an interval and a force flag
        *) echo "Invalid parameter: $parm"; exit 1 ;;
      esac
      shift 2 2>/dev/null || shift $#
    done ;;
  check) exit 1 ;;
  *) echo "Unknown operation: $op"; exit 1 ;;
esac
