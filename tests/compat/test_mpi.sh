#!/usr/bin/env bash
# MPI over swverbs, unmodified Debian MPIs: tests/compat/mpi_check.c (ping-pong 1 B .. 4 MiB,
# allreduce, alltoall, every byte checked), two ranks, with
#   Open MPI pml ucx over rc_verbs and over ud_verbs (IB-style swv0; ud_verbs on RoCE-style
#   swr0 too), Open MPI pml ob1 + btl openib,self, MPICH ch4:ucx over rc_verbs and ud_verbs.
# Debian's /etc/openmpi/openmpi-mca-params.conf excludes ucx, openib and ofi (pml = ^ucx,
# btl = ^uct,openib,ofi, osc = ^ucx,pt2pt): the OMPI_MCA_* variables below override those
# lists. Each run must also show that the transport asked for carried the traffic (UCX's
# ep_cfg lines at UCX_LOG_LEVEL=info, Open MPI's bml choice at btl_base_verbose).
. "$(dirname "$0")/lib.sh"
need mpicc.openmpi libopenmpi-dev
need mpirun.openmpi openmpi-bin
need mpicc.mpich libmpich-dev
need mpiexec.mpich mpich
export XDG_RUNTIME_DIR="$TMP/xdg"
mkdir -m 700 "$XDG_RUNTIME_DIR"
src="$(dirname "$0")/mpi_check.c"
mpicc.openmpi -O2 -Wall -Werror -o "$TMP/mpi_check_ompi" "$src" || fail "mpicc.openmpi"
mpicc.mpich -O2 -Wall -Werror -o "$TMP/mpi_check_mpich" "$src" || fail "mpicc.mpich"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds (swverbs-run preloads libasan): ASan's allocator never hands freed
# buffers back to the kernel, so Open MPI's registration cache (leave_pinned) still holds
# registrations at MPI_Finalize, and rcache/grdma then calls btl openib's deregistration
# after that component has been unloaded (a SIGSEGV inside Open MPI). Without the cache
# nothing is left over; plain builds keep Open MPI's default.
asan_build=$(grep -c libasan "$SWVERBS_RUN")
# Keep Open MPI off the network interfaces it would otherwise probe for its own wiring.
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
unset UCX_UD_VERBS_ETH_DGID_CHECK

# run NAME EXPECT CMD...: CMD must print "mpi_check: OK" and a line matching EXPECT.
run() {
	local name=$1 expect=$2
	shift 2
	if ! timeout 300 "$SWVERBS_RUN" "$@" >"$TMP/$name" 2>&1 ||
		! grep -q '^mpi_check: OK$' "$TMP/$name"; then
		cat "$TMP/$name"
		fail "$name"
	fi
	grep -Eq "$expect" "$TMP/$name" || { cat "$TMP/$name"; fail "$name: not over $expect"; }
	echo "ok: $name: $(grep '^pingpong' "$TMP/$name")"
}

ompi_ucx() { # NAME DEV TLS
	SWVERBS_DEVICES="$2=127.0.0.1/8$([ "${2:0:3}" = swr ] && echo ,roce)" \
		OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx OMPI_MCA_btl=self OMPI_MCA_mtl=^ofi \
		UCX_TLS="$3,self" UCX_NET_DEVICES="$2:1" \
		run "$1" "ep_cfg.*tag\\(.*${3/_v/_verbs}/$2:1" \
		mpirun.openmpi -np 2 -x UCX_LOG_LEVEL=info "$TMP/mpi_check_ompi"
}
ompi_ucx ompi.pml_ucx.rc_verbs swv0 rc_v
ompi_ucx ompi.pml_ucx.ud_verbs swv0 ud_v
ompi_ucx ompi.pml_ucx.ud_verbs.roce swr0 ud_v

if [ "$asan_build" != 0 ]; then
	loud "*** sanitizer build: btl openib runs with OMPI_MCA_mpi_leave_pinned=0 (above) ***"
	export OMPI_MCA_mpi_leave_pinned=0
fi
OMPI_MCA_pml=ob1 OMPI_MCA_btl=openib,self OMPI_MCA_mtl=^ofi OMPI_MCA_osc=^ucx,pt2pt \
	OMPI_MCA_btl_openib_allow_ib=1 OMPI_MCA_btl_openib_warn_no_device_params_found=0 \
	run ompi.btl_openib "bml: Using openib btl for send" \
	mpirun.openmpi -np 2 --mca btl_base_verbose 30 "$TMP/mpi_check_ompi"

# mtl ofi: libfabric's verbs provider under RxM (RC connections through swverbs'
# librdmacm). FI_PROVIDER keeps libfabric to that stack; the run must show the verbs
# domain (mtl_ofi's provider line) and RxM accepting a connection over verbs.
OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_btl=self OMPI_MCA_osc=^ucx,pt2pt \
	OMPI_MCA_mtl_ofi_provider_include="verbs;ofi_rxm" FI_PROVIDER="verbs;ofi_rxm" \
	FI_LOG_LEVEL=info \
	run ompi.mtl_ofi.rxm "mtl:ofi:provider: swv0\$" \
	mpirun.openmpi -np 2 --mca mtl_base_verbose 30 "$TMP/mpi_check_ompi"
grep -q 'ofi_rxm:ep_ctrl:rxm_process_connreq' "$TMP/ompi.mtl_ofi.rxm" ||
	{ cat "$TMP/ompi.mtl_ofi.rxm"; fail "ompi.mtl_ofi.rxm: no RxM connection over verbs"; }

mpichversion | grep -q 'ch4:ucx' || fail "Debian's MPICH is not ch4:ucx: $(mpichversion | grep Device)"
for tls in rc_v ud_v; do
	UCX_TLS="$tls,self" UCX_NET_DEVICES=swv0:1 \
		run "mpich.ch4_ucx.${tls/_v/_verbs}" "ep_cfg.*tag\\(.*${tls/_v/_verbs}/swv0:1" \
		mpiexec.mpich -n 2 -genv UCX_LOG_LEVEL info "$TMP/mpi_check_mpich"
done
exit 0
