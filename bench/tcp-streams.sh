#!/usr/bin/env bash
# Several TCP streams per pair of ranks (TIDE_TCP_STREAMS) where the network caps
# each flow, as clouds do (AWS: 5 Gbit/s per flow outside a placement group).
#
# Two network namespaces play two hosts, joined by veth pairs on a bridge. On
# each namespace's link every TCP flow between the two gets its own HTB class
# capped at CAP (default 1gbit): a filter per flow, added as soon as `ss` shows
# the connection (the kernel here has no fq qdisc, whose maxrate would do the
# same per flow). The 2-rank allreduce then runs with 1, 2 and 4 streams;
# the table shows bus bandwidth at 1, 4 and 16 MiB (the first sizes run before the
# filters are in place and are not shown). Needs root.
#
#   bench/tcp-streams.sh [BUILD] [CAP]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
here=$bench_root
build=$(bench_build_dir "${1:-}")
cap=${2:-1gbit}
tide=$build/tide
bench_require "$tide"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 77; }
p=ts$$
net=10.215.$(($$ % 250 + 1))
work=$(mktemp -d)
cleanup() {
  for i in 1 2; do ip netns del ${p}h$i 2>/dev/null || true; done
  ip link del ${p}b 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip link add ${p}b type bridge
ip addr add $net.1/24 dev ${p}b
ip link set ${p}b up
for i in 1 2; do
  ip netns add ${p}h$i
  ip link add ${p}v$i type veth peer name eth0 netns ${p}h$i
  ip link set ${p}v$i master ${p}b up
  ip -n ${p}h$i addr add $net.1$i/24 dev eth0
  ip -n ${p}h$i link set eth0 up
  ip -n ${p}h$i link set lo up
done
printf '#!/bin/sh\nprintf "%sh1:1\\n%sh2:1\\n"\n' $p $p > "$work/hosts.sh"
chmod +x "$work/hosts.sh"
sleep 1

# Gives every flow between the two namespaces, seen from namespace NS, its own
# capped class; runs until killed.
cap_flows() {
  local ns=$1 class=10
  ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 1 r2q 1000
  ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:1 htb rate 100gbit quantum 200000
  declare -A seen=()
  while :; do
    while read -r local peer; do
      [ -n "${seen[$local $peer]:-}" ] && continue
      case $peer in $net.1:*) continue ;; esac # the coordinator's control connection
      seen[$local $peer]=1
      ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:$class htb rate "$cap" ceil "$cap" quantum 60000
      ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
        match ip sport "${local##*:}" 0xffff match ip dport "${peer##*:}" 0xffff flowid 1:$class
      class=$((class + 1))
    done < <(ip netns exec "$ns" ss -Htn state established | awk '{print $3, $4}')
    sleep 0.02
  done
}

echo "2 ranks in two network namespaces, each TCP flow capped at $cap; busbw in GB/s"
printf "%8s %12s %12s %12s\n" streams 1MiB 4MiB 16MiB
for k in 1 2 4; do
  for i in 1 2; do ip netns exec ${p}h$i tc qdisc del dev eth0 root 2>/dev/null || true; done
  cap_flows ${p}h1 & c1=$!
  cap_flows ${p}h2 & c2=$!
  TIDE_TCP_STREAMS=$k timeout 300 "$tide" run --quiet --min 2 --max 2 --hosts-script "$work/hosts.sh" \
    --launch 'ip netns exec {host}' --listen $net.1 -- \
    "$tide" bench-worker 4096 16777216 json >"$work/out.$k" 2>"$work/err.$k" || true
  kill $c1 $c2 2>/dev/null || true
  wait $c1 $c2 2>/dev/null || true
  bw() { grep "\"bytes\":$1," "$work/out.$k" | sed -E 's/.*"busbw_gbs":([0-9.]+).*/\1/'; }
  printf "%8s %12s %12s %12s\n" "$k" "$(bw 1048576)" "$(bw 4194304)" "$(bw 16777216)"
done
