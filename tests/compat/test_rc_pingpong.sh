#!/usr/bin/env bash
# ibv_rc_pingpong (ibverbs-utils), two processes, LID-addressed and with -g 0; the
# new post-send API (-N), completion timestamps (-t) and on-demand paging (-o/-O/-P).
. "$(dirname "$0")/lib.sh"
need ibv_rc_pingpong ibverbs-utils
for opts in "" "-g 0" "-s 65536 -n 200 -m 4096" "-e -n 200"; do
	p=$(free_port)
	PAIR_PORT=$p pair "rc_pingpong $opts" 60 ibv_rc_pingpong -p "$p" $opts -- ibv_rc_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/rc_pingpong $opts.client" || fail "no throughput line ($opts)"
done
# -N posts through the ibv_wr_* API (create_qp_ex with send ops, ibv_qp_to_qp_ex);
# -t polls an extended CQ with completion timestamps and prints their spread. (-t -e is
# left out: the program treats a completion event whose CQE it already took as an
# error, a race of its own on any device; docs/compat.md.)
for opts in "-N -n 200" "-N -e -n 200" "-t -n 200" "-N -t -n 200"; do
	p=$(free_port)
	PAIR_PORT=$p pair "rc_pingpong $opts" 60 ibv_rc_pingpong -p "$p" $opts -- ibv_rc_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/rc_pingpong $opts.client" || fail "no throughput line ($opts)"
	case "$opts" in
	*-t*)
		for side in server client; do
			grep -q "Average receive completion clock cycles" "$TMP/rc_pingpong $opts.$side" ||
				fail "no timestamp statistics ($opts, $side)"
		done
		;;
	esac
done
# On-demand paging: -o registers the buffer with IBV_ACCESS_ON_DEMAND, -O as the implicit
# whole-address-space MR, -P prefetches it with ibv_advise_mr (FLUSH) first.
for opts in "-o -n 200" "-o -P -n 200" "-o -O -P -n 200"; do
	p=$(free_port)
	PAIR_PORT=$p pair "rc_pingpong $opts" 60 ibv_rc_pingpong -p "$p" $opts -- ibv_rc_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/rc_pingpong $opts.client" || fail "no throughput line ($opts)"
done
