#!/usr/bin/env bash
# MPI ranks on two "hosts": network namespaces joined by a veth pair, each rank with a
# swverbs device swv0 bound to its own namespace's address. tests/compat/mpi_check.c
# (every byte checked) with Open MPI pml ucx (rc_verbs), Open MPI btl openib and MPICH
# ch4:ucx (rc_verbs). The launchers reach the second "host" through a stand-in for ssh
# that runs the command in that host's namespace (Open MPI plm_rsh_agent, hydra
# -launcher-exec); each rank sets SWVERBS_DEVICES from the address it finds (both
# launchers pass the launcher's environment on to the ranks).
. "$(dirname "$0")/lib.sh"
need mpicc.openmpi libopenmpi-dev
need mpirun.openmpi openmpi-bin
need mpicc.mpich libmpich-dev
need mpiexec.mpich mpich
two_hosts swm 10.79.0

export XDG_RUNTIME_DIR="$TMP/xdg"
mkdir -m 700 "$XDG_RUNTIME_DIR"
src="$(dirname "$0")/mpi_check.c"
mpicc.openmpi -O2 -Wall -Werror -o "$TMP/mpi_check_ompi" "$src" || fail "mpicc.openmpi"
mpicc.mpich -O2 -Wall -Werror -o "$TMP/mpi_check_mpich" "$src" || fail "mpicc.mpich"
# rsh HOST CMD... (options before HOST ignored): CMD in HOST's namespace.
cat >"$TMP/rsh" <<EOS
#!/usr/bin/env bash
while [ "\${1#-}" != "\$1" ]; do shift; done
case \$1 in 10.79.0.1) ns=$A ;; 10.79.0.2) ns=$B ;; *) echo "rsh: unknown host \$1" >&2; exit 255 ;; esac
shift
exec ip netns exec \$ns sh -c "\$*"
EOS
# rank CMD...: CMD with the swverbs device of the namespace it runs in; logs where.
cat >"$TMP/rank" <<'EOS'
#!/usr/bin/env bash
ip=$(ip -o -4 addr show | grep -o '10\.79\.0\.[12]' | head -1)
export SWVERBS_DEVICES="swv0=$ip/24"
echo "rank on $ip"
exec "$@"
EOS
chmod +x "$TMP/rsh" "$TMP/rank"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds (swverbs-run preloads libasan): ASan's allocator never hands freed
# buffers back to the kernel, so Open MPI's registration cache (leave_pinned) still holds
# registrations at MPI_Finalize, and rcache/grdma then calls btl openib's deregistration
# after that component has been unloaded (a SIGSEGV inside Open MPI). Without the cache
# nothing is left over; plain builds keep Open MPI's default.
asan_build=$(grep -c libasan "$SWVERBS_RUN")
hosts=10.79.0.1,10.79.0.2

# run NAME EXPECT CMD...: CMD (run in namespace A under swverbs-run) must pass with one
# rank in each namespace and print a line matching EXPECT.
run() {
	local name=$1 expect=$2
	shift 2
	if ! timeout 300 ip netns exec $A env SWVERBS_DEVICES="swv0=10.79.0.1/24" \
		"$SWVERBS_RUN" "$@" >"$TMP/$name" 2>&1 || ! grep -q '^mpi_check: OK$' "$TMP/$name"; then
		cat "$TMP/$name"
		fail "$name"
	fi
	grep -q '^rank on 10.79.0.1$' "$TMP/$name" && grep -q '^rank on 10.79.0.2$' "$TMP/$name" ||
		{ cat "$TMP/$name"; fail "$name: the ranks were not in both namespaces"; }
	grep -Eq "$expect" "$TMP/$name" || { cat "$TMP/$name"; fail "$name: not over $expect"; }
	echo "ok: $name: $(grep '^pingpong' "$TMP/$name")"
}
ompi=(mpirun.openmpi --mca plm_rsh_agent "$TMP/rsh" --host $hosts -np 2
	--mca oob_tcp_if_include 10.79.0.0/24 -x LD_PRELOAD)
OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx OMPI_MCA_btl=self OMPI_MCA_mtl=^ofi \
	UCX_TLS=rc_v,self UCX_NET_DEVICES=swv0:1 \
	run ompi.pml_ucx.rc_verbs "ep_cfg.*tag\\(rc_verbs/swv0:1" \
	"${ompi[@]}" -x UCX_LOG_LEVEL=info "$TMP/rank" "$TMP/mpi_check_ompi"
if [ "$asan_build" != 0 ]; then
	loud "*** sanitizer build: btl openib runs with OMPI_MCA_mpi_leave_pinned=0 (above) ***"
	export OMPI_MCA_mpi_leave_pinned=0
fi
OMPI_MCA_pml=ob1 OMPI_MCA_btl=openib,self OMPI_MCA_mtl=^ofi OMPI_MCA_osc=^ucx,pt2pt \
	OMPI_MCA_btl_openib_allow_ib=1 OMPI_MCA_btl_openib_warn_no_device_params_found=0 \
	run ompi.btl_openib "bml: Using openib btl for send" \
	"${ompi[@]}" --mca btl_base_verbose 30 "$TMP/rank" "$TMP/mpi_check_ompi"
UCX_TLS=rc_v,self UCX_NET_DEVICES=swv0:1 \
	run mpich.ch4_ucx.rc_verbs "ep_cfg.*tag\\(rc_verbs/swv0:1" \
	mpiexec.mpich -launcher ssh -launcher-exec "$TMP/rsh" -iface v$A -hosts $hosts -n 2 -ppn 1 \
	-genv UCX_LOG_LEVEL info "$TMP/rank" "$TMP/mpi_check_mpich"
exit 0
