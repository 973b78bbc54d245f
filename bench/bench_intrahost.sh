#!/usr/bin/env bash
# bench_intrahost: swverbs between two processes of one host, on the intra-host link (the
# default) and on the forced UDP path (SWVERBS_SHM=0), against anchors measured in the same
# invocation: UCX's shared memory (ucx_perftest, UCX_TLS=sm), libfabric's shm provider
# (fi_pingpong), sockperf UDP ping-pong with both sides busy-polling, qperf udp_bw. A peer
# without an inbox (SWVERBS_SHM=0 on the server alone) stands for one on another host: the
# intra-host link must cost it nothing against the forced UDP path.
# Every figure is the median of ROUNDS runs, alternating the systems, with the spread
# (min..max); the ratios are the issue's acceptance ratios (docs/performance.md).
#
#   usage: bench/bench_intrahost.sh [BUILD_DIR] [ROUNDS]     (default: build 3)
set -u
build=${1:-build}
rounds=${2:-3}
run=$build/tools/swverbs-run
[ -x "$run" ] || { echo "no $run: build first" >&2; exit 2; }
for t in ib_send_lat ucx_perftest sockperf qperf fi_pingpong; do
	command -v $t >/dev/null || { echo "bench_intrahost: $t missing (make test installs the anchors)" >&2; exit 2; }
done
unset UCX_TLS UCX_NET_DEVICES

port() { echo $((20000 + RANDOM % 30000)); }
listening() { # PORT [udp]: wait until something listens there (30 s)
	local opt=-ltn
	[ "${2:-}" = udp ] && opt=-lun
	for _ in $(seq 300); do ss $opt | grep -q ":$1 " && return 0; sleep 0.1; done
	return 1
}
median() { sort -g | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print "nan"}'; }
spread() { sort -g | awk 'NR==1{lo=$1} {hi=$1} END{printf "%s..%s", lo, hi}'; }

# perftest: ENV TEST ARGS... -> "typical p99" (latency, us) or "MB/s" (bandwidth); the
# server runs with SRV_ENV instead when that is set
perftest() {
	local env=$1 t=$2
	shift 2
	local p
	p=$(port)
	env ${SRV_ENV:-$env} "$run" "$t" -d swv0 -p "$p" "$@" >/dev/null 2>&1 &
	local srv=$!
	listening "$p"
	local out
	out=$(env $env timeout 120 "$run" "$t" -d swv0 -p "$p" "$@" localhost 2>&1)
	wait $srv 2>/dev/null
	case $t in
	*_lat) echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $5, $8; exit}' ;;
	*) echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 4 {print $4; exit}' ;;
	esac
}

# ucx_perftest over shared memory: TEST -> us (tag_lat, the median) or MB/s (tag_bw, average)
ucx() {
	local p
	p=$(port)
	UCX_TLS=sm ucx_perftest -p "$p" >/dev/null 2>&1 &
	local srv=$!
	listening "$p"
	local args=(-t "$1" -n 100000)
	[ "$1" = tag_bw ] && args=(-t tag_bw -s "$2" -n 2000)
	UCX_TLS=sm timeout 120 ucx_perftest localhost -p "$p" "${args[@]}" 2>&1 |
		awk -v t="$1" '/^Final:/{print (t == "tag_lat") ? $3 : $6}'
	wait $srv 2>/dev/null
}

# sockperf UDP ping-pong, both sides busy-polling (non-blocking sockets, epoll with a zero
# timeout): us
sockperf_lat() {
	local p
	p=$(port)
	sockperf server -i 127.0.0.1 -p "$p" --nonblocked --timeout 0 >/dev/null 2>&1 &
	local srv=$!
	listening "$p" udp
	sockperf ping-pong -i 127.0.0.1 -p "$p" --nonblocked --timeout 0 -m 14 -t 2 2>&1 |
		awk '/Summary: Latency is/{print $(NF-1)}'
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
}

# qperf udp_bw of 63 KiB messages (64 KiB exceeds a UDP datagram), received side: MB/s
qperf_udp_bw() {
	local p
	p=$(port)
	qperf -lp "$p" >/dev/null 2>&1 &
	local srv=$!
	listening "$p"
	qperf -lp "$p" -m 63K -t 2 localhost udp_bw 2>&1 |
		awk '/recv_bw/{v=$3; u=$4; if (u ~ /^GB/) v *= 1000; if (u ~ /^KB/) v /= 1000; print v}'
	qperf -lp "$p" localhost quit >/dev/null 2>&1
	wait $srv 2>/dev/null
}

# libfabric shm provider ping-pong: SIZE -> "usec/xfer MB/s"
fi_shm() {
	local p
	p=$(port)
	fi_pingpong -p shm -e rdm -B "$p" -S "$1" -I 20000 >/dev/null 2>&1 &
	local srv=$!
	listening "$p"
	timeout 60 fi_pingpong -p shm -e rdm -P "$p" -S "$1" -I 20000 localhost 2>&1 |
		awk '$1 ~ /^[0-9]/ && NF >= 7 {print $7, $6; exit}'
	wait $srv 2>/dev/null
}

declare -A V
add() { V[$1]="${V[$1]:-} $2"; }
for ((r = 0; r < rounds; r++)); do
	for path in shm udp; do
		env=SWVERBS_SHM=1
		[ $path = udp ] && env=SWVERBS_SHM=0
		for t in ib_send_lat ib_write_lat ib_read_lat; do
			read -r typ p99 <<<"$(perftest $env $t -s 2 -n 20000)"
			add "$path.$t.typ" "${typ:-nan}"
			add "$path.$t.p99" "${p99:-nan}"
		done
		for t in ib_write_bw ib_read_bw ib_send_bw; do
			for s in 65536 1048576; do
				n=20000
				[ $s = 1048576 ] && n=2000
				add "$path.$t.$s" "$(perftest $env $t -s $s -n $n)"
			done
		done
	done
	# a peer without an inbox (as one on another host): the client, which has one, learns
	# that its destination is not on the intra-host link and sends by UDP
	off() { SRV_ENV=SWVERBS_SHM=0 perftest SWVERBS_SHM=1 "$@"; }
	read -r typ _ <<<"$(off ib_send_lat -s 2 -n 20000)"
	add off.ib_send_lat.typ "${typ:-nan}"
	add off.ib_write_bw.65536 "$(off ib_write_bw -s 65536 -n 20000)"
	add ucx.tag_lat "$(ucx tag_lat)"
	add ucx.tag_bw.65536 "$(ucx tag_bw 65536)"
	add ucx.tag_bw.1048576 "$(ucx tag_bw 1048576)"
	add sockperf.lat "$(sockperf_lat)"
	add qperf.udp_bw "$(qperf_udp_bw)"
	read -r l _ <<<"$(fi_shm 64)"
	add fi_shm.lat64 "${l:-nan}"
	read -r _ b <<<"$(fi_shm 65536)"
	add fi_shm.bw65536 "${b:-nan}"
done

med() { printf '%s\n' ${V[$1]} | median; }
spr() { printf '%s\n' ${V[$1]} | spread; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (b > 0 && a == a + 0) printf "%.2f", a / b; else print "nan"}'; }
row() { printf '%-34s %10s  (%s)\n' "$1" "$(med "$2")" "$(spr "$2")"; }

echo "bench_intrahost: median of $rounds rounds (spread), $(nproc) CPUs"
echo "latency, us (perftest 2 B: typical / 99th percentile):"
for path in shm udp; do
	for t in ib_send_lat ib_write_lat ib_read_lat; do
		row "  $path $t typical" "$path.$t.typ"
		row "  $path $t p99" "$path.$t.p99"
	done
done
row "  off-host peer ib_send_lat typical" off.ib_send_lat.typ
row "  UCX sm tag_lat" ucx.tag_lat
row "  libfabric shm 64 B" fi_shm.lat64
row "  sockperf UDP busy-poll" sockperf.lat
echo "bandwidth, MB/s:"
for path in shm udp; do
	for t in ib_write_bw ib_read_bw ib_send_bw; do
		for s in 65536 1048576; do row "  $path $t $s" "$path.$t.$s"; done
	done
done
row "  off-host peer ib_write_bw 65536" off.ib_write_bw.65536
row "  UCX sm tag_bw 65536" ucx.tag_bw.65536
row "  UCX sm tag_bw 1048576" ucx.tag_bw.1048576
row "  libfabric shm 65536" fi_shm.bw65536
row "  qperf udp_bw 63K (received)" qperf.udp_bw
echo "ratios (goal in brackets):"
for t in ib_send_lat ib_write_lat ib_read_lat; do
	typ=$(med shm.$t.typ)
	echo "  shm $t typical / UCX sm tag_lat        $(ratio "$typ" "$(med ucx.tag_lat)")  [<= 6]"
	echo "  shm $t p99 / typical                   $(ratio "$(med shm.$t.p99)" "$typ")  [<= 3]"
	echo "  udp $t typical / sockperf busy-poll    $(ratio "$(med udp.$t.typ)" "$(med sockperf.lat)")  [<= 1.5]"
done
for t in ib_write_bw ib_read_bw ib_send_bw; do
	echo "  shm $t 1 MiB / UCX sm tag_bw 1 MiB     $(ratio "$(med shm.$t.1048576)" "$(med ucx.tag_bw.1048576)")  [>= 0.8]"
	echo "  shm $t 64 KiB / UCX sm tag_bw 1 MiB    $(ratio "$(med shm.$t.65536)" "$(med ucx.tag_bw.1048576)")  [>= 0.5]"
	echo "  udp $t 64 KiB / qperf udp_bw           $(ratio "$(med udp.$t.65536)" "$(med qperf.udp_bw)")  [>= 1.0]"
done
# the intra-host link costs a peer off this host nothing: as the forced UDP path
r=$(ratio "$(med off.ib_send_lat.typ)" "$(med udp.ib_send_lat.typ)")
echo "  off-host ib_send_lat typical / udp       $r  [<= 1.1]"
r=$(ratio "$(med off.ib_write_bw.65536)" "$(med udp.ib_write_bw.65536)")
echo "  off-host ib_write_bw 64 KiB / udp        $r  [>= 0.9]"
