#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ethernet.sh - runs a command as if its MPI ranks talked over Ethernet:
# inside a private network namespace whose loopback is rate-limited with a
# tc token bucket (tbf), with Open MPI forced onto TCP over that loopback.
#
#   tools/ethernet.sh --rate 1gbit -- mpirun -n 4 squall-bench -b 64M -e 64M
#
# Needs: unshare (util-linux), ip and tc (iproute2), and either root or
# unprivileged user namespaces. Only this command and its children see the
# limited loopback; the host's network is untouched.
set -eu

me=${0##*/}
rate=1gbit
burst=
latency=50ms
links=1

usage() {
  cat <<EOF
usage: $me [--rate RATE] [--links N] [--burst BYTES] [--latency TIME] [--] COMMAND [ARGS...]
Runs COMMAND in a private network namespace whose loopback carries at most
RATE (a tc token bucket), with Open MPI on TCP over that loopback
(OMPI_MCA_btl=tcp,self, OMPI_MCA_btl_tcp_if_include=lo, oob likewise).

  --rate RATE     bits per second, tc syntax: 100mbit, 1gbit, 10gbit (default 1gbit)
  --links N       the loopback is one shared medium: every byte every rank
                  sends crosses it. --links N sets it to N x RATE, so that
                  N ranks each get about RATE, like N nodes with a RATE NIC
                  each (default 1: all ranks share one RATE link)
  --burst BYTES   token bucket depth (default: 1 ms at the rate, at least
                  128k: the loopback's 64 KiB MTU must fit)
  --latency TIME  longest a packet may wait in the bucket's queue (default 50ms)
  -h, --help      this help

After COMMAND exits, one line on stderr reports what crossed the loopback
(tc's counters); the exit status is COMMAND's.
Example: $me --rate 1gbit -- mpirun -n 4 squall-bench -b 64M -e 64M -n 5 -w 1
EOF
}

die() {
  echo "$me: $*" >&2
  exit 2
}

# A tc rate ("1gbit", "100mbit", "2.5gbit") in bits per second.
rate_bits() {
  echo "$1" | awk '{
    v = $0; u = v; sub(/^[0-9.]+/, "", u); n = substr(v, 1, length(v) - length(u))
    if (n == "" || n !~ /^[0-9]*\.?[0-9]*$/) exit 1
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    u = tolower(u); if (!(u in m)) exit 1
    printf "%.0f\n", n * m[u] }'
}

while test $# -gt 0; do
  case $1 in
  --rate) test $# -ge 2 || die "--rate needs a value, e.g. 1gbit"; rate=$2; shift 2 ;;
  --rate=*) rate=${1#*=}; shift ;;
  --links) test $# -ge 2 || die "--links needs a value, e.g. 4"; links=$2; shift 2 ;;
  --links=*) links=${1#*=}; shift ;;
  --burst) test $# -ge 2 || die "--burst needs a value, e.g. 256k"; burst=$2; shift 2 ;;
  --burst=*) burst=${1#*=}; shift ;;
  --latency) test $# -ge 2 || die "--latency needs a value, e.g. 50ms"; latency=$2; shift 2 ;;
  --latency=*) latency=${1#*=}; shift ;;
  -h | --help) usage; exit 0 ;;
  --) shift; break ;;
  -*) die "unknown option '$1' (see $me --help)" ;;
  *) break ;;
  esac
done
test $# -gt 0 || { usage >&2; exit 2; }

bits=$(rate_bits "$rate") || die "--rate '$rate' is invalid: accepted is a number with bit, kbit, mbit, gbit or tbit (tc's syntax, powers of 1000), e.g. 1gbit"
test "$bits" -gt 0 || die "--rate '$rate' is invalid: it must be more than 0"
case $links in '' | *[!0-9]* | 0*) die "--links '$links' is invalid: accepted is a positive integer (no leading 0)" ;; esac
test "$links" -ge 1 || die "--links '$links' is invalid: accepted is a positive integer"
total=$((bits * links))
if test -z "$burst"; then
  burst=$((total / 8 / 1000)) # 1 ms of traffic
  test "$burst" -ge 131072 || burst=131072
fi

if test "${SQUALL_ETHERNET_INSIDE:-}" != 1; then
  # Outside: check the tools, then enter a new network namespace (as root,
  # or as an unprivileged user through a user namespace) and run this
  # script again there.
  for tool in unshare ip tc; do
    command -v $tool >/dev/null 2>&1 || case $tool in
      unshare) die "unshare not found: install util-linux (Debian: apt-get install util-linux)" ;;
      *) die "$tool not found: install iproute2 (Debian: apt-get install iproute2)" ;;
    esac
  done
  SQUALL_ETHERNET_OUTER_UID=$(id -u)
  export SQUALL_ETHERNET_INSIDE=1 SQUALL_ETHERNET_OUTER_UID
  if test "$(id -u)" = 0; then
    flags=-n
  else
    flags=-rn
  fi
  if ! err=$(unshare $flags true 2>&1); then
    cat >&2 <<EOF
$me: cannot create a private network namespace (unshare $flags: $err).
  It needs root (run it with sudo), or unprivileged user namespaces
  (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0);
  inside a container, the container needs CAP_SYS_ADMIN (docker run --privileged
  or --cap-add SYS_ADMIN,NET_ADMIN).
EOF
    exit 2
  fi
  exec unshare $flags -- "$0" --rate "$rate" --links "$links" --burst "$burst" --latency "$latency" -- "$@"
fi

# Inside the namespace: a loopback of its own, rate-limited.
ip link set lo up || die "cannot bring up lo in the new namespace (ip link set lo up failed)"
if ! err=$(tc qdisc add dev lo root tbf rate "${total}bit" burst "$burst" latency "$latency" 2>&1); then
  cat >&2 <<EOF
$me: cannot rate-limit lo: tc qdisc add dev lo root tbf rate ${total}bit burst $burst latency $latency: $err
  The kernel needs the tbf qdisc (CONFIG_NET_SCH_TBF; modprobe sch_tbf) and
  this process CAP_NET_ADMIN in the namespace (root, or a user namespace).
EOF
  exit 2
fi

# Open MPI: TCP over lo only (no shared memory, no other transport), and
# its out-of-band channel on lo too.
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_pml=ob1 OMPI_MCA_rmaps_base_oversubscribe=1
# uid 0 here but not outside means a user namespace: let mpirun start.
if test "$(id -u)" = 0 && test "${SQUALL_ETHERNET_OUTER_UID:-0}" != 0; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if test "$links" = 1; then
  share="shared by all ranks"
else
  share="$links links of $rate, shared by all ranks"
fi
export SQUALL_BENCH_LINK="tbf ${rate} on lo (${total} bit/s, $share; tools/ethernet.sh)"
unset SQUALL_ETHERNET_INSIDE SQUALL_ETHERNET_OUTER_UID

set +e
"$@"
status=$?
set -e
# What crossed the link, from the qdisc's own counters.
tc -s qdisc show dev lo | awk -v me="$me" -v rate="$SQUALL_BENCH_LINK" '
  /Sent/ { sent = $2; pkts = $4; drop = $7; sub(/,$/, "", drop) }
  END { if (sent != "") printf "%s: lo carried %.1f MB in %d packets (%s dropped) through %s\n",
          me, sent / 1e6, pkts, drop, rate > "/dev/stderr" }'
exit $status
