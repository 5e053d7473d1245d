#!/usr/bin/env bash
# A single-node Slurm cluster from Debian's packages (slurmctld, slurmd, slurm-client, munge), for
# testing potato-array.sbatch on one machine without systemd (a container, a CI runner, a laptop).
#
#   deploy/slurm/testcluster.sh start DIR   # writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#   export SLURM_CONF=DIR/slurm.conf        # then sbatch, squeue, sinfo talk to it
#   deploy/slurm/testcluster.sh stop DIR    # stops the three daemons by the pids they wrote
#
# Everything lives under DIR (state, spool, logs, the munge socket and key), on ports of its own, so that
# it disturbs no Slurm or munge already on the machine. It runs as root (slurmd must start jobs as their
# submitter) and configures one node, named after this host, with all its CPUs, its memory, and one GPU
# GRES of count only (no device file), so that a script asking --gres=gpu:1 is scheduled unchanged while
# the job itself runs on the CPU. Processes are tracked by /proc (proctrack/linuxproc) and not confined
# (task/none): no cgroups are needed.
set -euo pipefail
cmd=${1:?usage: testcluster.sh start|stop DIR}
dir=$(mkdir -p "${2:?usage: testcluster.sh start|stop DIR}" && cd "$2" && pwd)

stop() {
	for p in slurmd slurmctld munged; do
		if [ -s "$dir/$p.pid" ]; then
			kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
		fi
	done
	for p in slurmd slurmctld munged; do
		for _ in $(seq 50); do
			[ -s "$dir/$p.pid" ] && kill -0 "$(cat "$dir/$p.pid")" 2>/dev/null || break
			sleep 0.1
		done
		rm -f "$dir/$p.pid"
	done
}

case "$cmd" in
stop)
	stop
	exit 0
	;;
start) ;;
*)
	echo "usage: testcluster.sh start|stop DIR" >&2
	exit 2
	;;
esac

for bin in munged slurmctld slurmd sbatch; do
	command -v "$bin" >/dev/null || {
		echo "testcluster.sh: $bin not found: apt-get install slurmctld slurmd slurm-client munge" >&2
		exit 3
	}
done
[ "$(id -u)" -eq 0 ] || { echo "testcluster.sh: run as root (slurmd starts jobs as their user)" >&2; exit 3; }

host=$(hostname -s)
cpus=$(nproc)
mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10))
# Ports of its own, picked from the directory's name so that two clusters on a machine do not collide.
base=$((20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 20000))
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chown munge: "$dir/munge"
chmod 700 "$dir/munge"

# munge: a key of our own, its socket in DIR. munged runs as the munge user, as Debian runs it.
if [ ! -s "$dir/munge/munge.key" ]; then
	dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
	chown munge: "$dir/munge/munge.key"
	chmod 400 "$dir/munge/munge.key"
fi
runuser -u munge -- munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
	--pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" --force
for _ in $(seq 50); do [ -s "$dir/munge/munged.pid" ] && break; sleep 0.1; done
cp "$dir/munge/munged.pid" "$dir/munged.pid"

cat >"$dir/slurm.conf" <<CONF
ClusterName=potato-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=300
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
cat >"$dir/gres.conf" <<CONF
NodeName=$host Name=gpu File=/dev/null
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$dir/slurm.conf"
slurmd -f "$dir/slurm.conf" -N "$host"
# Wait until the node is idle (slurmd registered with slurmctld).
for _ in $(seq 100); do
	state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
	case "$state" in
	idle*) echo "testcluster.sh: node $host idle ($cpus CPUs); export SLURM_CONF=$dir/slurm.conf"; exit 0 ;;
	esac
	sleep 0.2
done
echo "testcluster.sh: the node did not come up (state '${state:-none}'); logs in $dir:" >&2
tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
stop
exit 1
