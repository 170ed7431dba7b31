#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# cluster.sh - runs an MPI program on an emulated cluster of N nodes x R
# ranks on this one machine: each node is a network namespace with its own
# hostname (UTS namespace) and one "NIC", a veth link to a bridge that is
# rate-limited in both directions with a tc token bucket (tbf). Ranks on the
# same node talk through shared memory, ranks on different nodes through
# TCP over their NICs, as on a real Ethernet cluster.
#
#   tools/cluster.sh --nodes 2 --ranks-per-node 2 --rate 250mbit -- ./squall-bench -b 64M -e 64M
#
# Everything (bridge, nodes, links, the hosts file) is built inside one
# private network and mount namespace that this script creates: nothing is
# added to the machine's own namespaces, and all of it disappears when the
# command ends, fails or is killed. Needs root (or unprivileged user
# namespaces), unshare and nsenter (util-linux), ip and tc (iproute2), and
# Open MPI's mpirun.
set -eu

me=${0##*/}
nodes=2
per_node=2
rate=1gbit
latency=50ms
subnet=10.77.0

usage() {
  cat <<EOF
usage: $me [--nodes N] [--ranks-per-node R] [--rate RATE] [--] PROGRAM [ARGS...]
Starts N x R ranks of PROGRAM with mpirun on an emulated cluster: N nodes
(network + UTS namespaces, hostnames sqnode0..), R consecutive ranks per
node, each node's NIC limited to RATE in each direction.

  --nodes N           nodes (default 2)
  --ranks-per-node R  ranks on each node (default 2)
  --rate RATE         each NIC's rate in each direction, tc syntax: 250mbit,
                      1gbit, 10gbit (default 1gbit)
  --latency TIME      longest a packet may wait in a NIC's queue (default 50ms)
  -h, --help          this help

Open MPI runs with shared memory inside a node and TCP between nodes
(btl self,vader,tcp), CPU binding off (else every node's ranks land on the
same core), one TCP link per peer, and the TCP BTL's PUT protocol off (it
halves two-way bandwidth). The setup is exported as SQUALL_BENCH_LINK, which
squall-bench prints in its header. After PROGRAM ends, one line per node on
stderr reports what its NIC carried each way (tc's own counters). The exit
status is mpirun's.
EOF
}

die() {
  echo "$me: $*" >&2
  exit 2
}

posint() { case $2 in '' | *[!0-9]* | 0*) die "$1 '$2' is invalid: accepted is a positive integer" ;; esac; }

while test $# -gt 0; do
  case $1 in
  --nodes) test $# -ge 2 || die "--nodes needs a value"; nodes=$2; shift 2 ;;
  --nodes=*) nodes=${1#*=}; shift ;;
  --ranks-per-node) test $# -ge 2 || die "--ranks-per-node needs a value"; per_node=$2; shift 2 ;;
  --ranks-per-node=*) per_node=${1#*=}; shift ;;
  --rate) test $# -ge 2 || die "--rate needs a value, e.g. 1gbit"; rate=$2; shift 2 ;;
  --rate=*) rate=${1#*=}; shift ;;
  --latency) test $# -ge 2 || die "--latency needs a value, e.g. 50ms"; latency=$2; shift 2 ;;
  --latency=*) latency=${1#*=}; shift ;;
  -h | --help) usage; exit 0 ;;
  --) shift; break ;;
  -*) die "unknown option '$1' (see $me --help)" ;;
  *) break ;;
  esac
done
test $# -gt 0 || { usage >&2; exit 2; }
posint --nodes "$nodes"
posint --ranks-per-node "$per_node"
test "$nodes" -le 200 || die "--nodes '$nodes' is invalid: at most 200 nodes"
case $rate in *[0-9]bit | *[0-9][kmgt]bit) ;; *) die "--rate '$rate' is invalid: accepted is a number with bit, kbit, mbit, gbit or tbit (tc's syntax), e.g. 250mbit" ;; esac

if test "${SQUALL_CLUSTER_INSIDE:-}" != 1; then
  for tool in unshare nsenter ip tc mpirun; do
    command -v $tool >/dev/null 2>&1 || case $tool in
      unshare | nsenter) die "$tool not found: install util-linux" ;;
      mpirun) die "mpirun not found: install Open MPI (Debian: openmpi-bin)" ;;
      *) die "$tool not found: install iproute2" ;;
    esac
  done
  flags="-n -m --propagation private"
  test "$(id -u)" = 0 || flags="-r $flags"
  if ! err=$(unshare $flags true 2>&1); then
    die "cannot create private network and mount namespaces (unshare $flags: $err); run as root or enable unprivileged user namespaces"
  fi
  export SQUALL_CLUSTER_INSIDE=1 SQUALL_CLUSTER_OUTER_UID="$(id -u)"
  # shellcheck disable=SC2086
  exec unshare $flags -- "$0" --nodes "$nodes" --ranks-per-node "$per_node" --rate "$rate" \
    --latency "$latency" -- "$@"
fi

# ---- inside the private namespaces: build the cluster
unset SQUALL_CLUSTER_INSIDE
outer_uid=${SQUALL_CLUSTER_OUTER_UID:-0}
unset SQUALL_CLUSTER_OUTER_UID
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-cluster.XXXXXX")
cleanup() {
  trap - EXIT INT TERM HUP
  for i in $(seq 0 $((nodes - 1))); do
    pids=$(ip netns pids "sqnode$i" 2>/dev/null || true)
    test -z "$pids" || kill -9 $pids 2>/dev/null || true
    ip netns del "sqnode$i" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM HUP

# Namespace handles and the hosts file live in this mount namespace only.
mkdir -p /run/netns
mount -t tmpfs squall-cluster /run/netns || die "cannot mount a private /run/netns"
ip link set lo up
ip link add sqbr0 type bridge || die "cannot create a bridge (is the bridge module available?)"
ip addr add "$subnet.254/24" dev sqbr0
ip link set sqbr0 up

# 1 ms of traffic, at least 128 KiB (a 64 KiB TSO segment must fit).
bits=$(echo "$rate" | awk '{ v=$0; u=v; sub(/^[0-9.]+/,"",u); n=substr(v,1,length(v)-length(u));
  m["bit"]=1; m["kbit"]=1e3; m["mbit"]=1e6; m["gbit"]=1e9; m["tbit"]=1e12; printf "%.0f\n", n*m[tolower(u)] }')
burst=$((bits / 8 / 1000))
test "$burst" -ge 131072 || burst=131072

{
  echo "127.0.0.1 localhost"
  echo "$subnet.254 sqhead"
} > "$work/hosts"
: > "$work/hostfile"
for i in $(seq 0 $((nodes - 1))); do
  ns=sqnode$i
  ip netns add "$ns"
  ip link add "sqv$i" type veth peer name eth0 netns "$ns"
  ip link set "sqv$i" master sqbr0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  # One NIC: the node's sending side, and the bridge's side towards it.
  tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency "$latency" ||
    die "cannot rate-limit sqnode$i's link (tc tbf; needs sch_tbf and CAP_NET_ADMIN)"
  tc qdisc add dev "sqv$i" root tbf rate "$rate" burst "$burst" latency "$latency"
  echo "$subnet.$((i + 1)) $ns" >> "$work/hosts"
  echo "$ns slots=$per_node" >> "$work/hostfile"
done
mount --bind "$work/hosts" /etc/hosts || die "cannot give the cluster its own /etc/hosts"

# The "ssh" Open MPI starts each node's daemon with: it enters the node's
# network namespace and a new UTS namespace named after the node (distinct
# hostnames keep Open MPI's shared-memory segment names apart), then runs
# the command line the way sshd would, through a shell.
cat > "$work/agent" <<'EOF'
#!/bin/sh
while test $# -gt 0; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
exec nsenter --net="/run/netns/$host" unshare -u sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
EOF
chmod +x "$work/agent"

total=$((nodes * per_node))
link="cluster: $nodes nodes x $per_node ranks, each node one NIC of $rate each way (tc tbf on a veth to a bridge; tools/cluster.sh); Open MPI btl self,vader,tcp, tcp_flags send,inplace (no put), binding off"
export SQUALL_BENCH_LINK="$link"
echo "$me: $link" >&2
if test "$(id -u)" = 0 && test "$outer_uid" != 0; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

set +e
mpirun -n "$total" --hostfile "$work/hostfile" --map-by slot --bind-to none \
  --mca plm_rsh_agent "$work/agent" \
  --mca btl self,vader,tcp --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
  --mca btl_tcp_links 1 --mca btl_tcp_flags send,inplace \
  --mca pml ob1 -x SQUALL_BENCH_LINK "$@"
status=$?
set -e

# What each NIC carried, from the qdiscs' own counters.
for i in $(seq 0 $((nodes - 1))); do
  up=$(tc -n "sqnode$i" -s qdisc show dev eth0 | awk '/Sent/ { print $2; exit }')
  down=$(tc -s qdisc show dev "sqv$i" | awk '/Sent/ { print $2; exit }')
  awk -v me="$me" -v n="sqnode$i" -v up="${up:-0}" -v down="${down:-0}" \
    'BEGIN { printf "%s: %s NIC sent %.1f MB, received %.1f MB\n", me, n, up / 1e6, down / 1e6 > "/dev/stderr" }'
done
exit $status
