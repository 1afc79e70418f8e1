#!/usr/bin/env bash
# scripts/slurm_local.sh start|stop|install DIR: a one-node Slurm cluster on this machine, for the tests.
# - install: Debian's slurm-wlm and munge (apt-get, as root), when sbatch or slurmd is missing;
# - start DIR (as root): writes DIR/slurm.conf and a munge key, starts munged, slurmctld and slurmd (every file and
#   socket under DIR, the daemons on free ports, the node's address 127.0.0.1), waits until the node takes jobs and
#   prints the SLURM_CONF to export for sbatch, squeue and scontrol;
# - stop DIR: stops the daemons that `start DIR` started (their pid files under DIR).
# The node is this machine, named localhost: cores and memory as slurmd finds them, no cgroups (processes are
# tracked through /proc, tasks not bound), requeue allowed. Only what `start` wrote is under DIR.
set -euo pipefail
ACTION=${1:-}
DIR=${2:-}

say() {
    echo "slurm_local: $*"
}

usage() {
    echo "slurm_local: Expected 'install', 'start DIR' or 'stop DIR'. Received: '${ACTION}' '${DIR}'." \
         "Run 'bash scripts/slurm_local.sh start /tmp/slurm' (after 'install' where sbatch is missing)." >&2
    exit 2
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

install() {
    if command -v sbatch >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
        say "slurm and munge are installed"
        return
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "slurm_local: Expected root to install slurm-wlm and munge. Received: user $(id -un)." \
             "Run 'sudo bash scripts/slurm_local.sh install', or install them with the system's package manager." >&2
        exit 1
    fi
    say "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null
}

# Waits for a daemon's file (its socket or pid file) to appear; fails naming the daemon's log.
wait_for() {
    local what=$1 file=$2 log=$3 tries=0
    while [ ! -e "$file" ]; do
        tries=$((tries + 1))
        if [ "$tries" -gt 600 ]; then
            echo "slurm_local: $what did not start within 60 s; its log $log says:" >&2
            tail -n 20 "$log" >&2 || true
            exit 1
        fi
        sleep 0.1
    done
}

write_conf() {
    local cpus memory
    cpus=$(nproc)
    memory=$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)
    # cred_expire: how long a requeued job waits before it may start again (120 s by default); sched_interval: how
    # often pending jobs are considered (60 s by default): a requeued job starts within seconds of that wait
    cat >"$DIR/slurm.conf" <<CONF
ClusterName=flowpipe
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket,cred_expire=30
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobs.txt
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
ReturnToService=2
MinJobAge=3600
KillWait=30
MpiDefault=none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

start() {
    [ -n "$DIR" ] || usage
    if [ "$(id -u)" -ne 0 ]; then
        echo "slurm_local: Expected root to start the cluster (slurmd starts jobs as their users). Received: user" \
             "$(id -un). Run it as root, or use a cluster of your site (SLURM_CONF)." >&2
        exit 1
    fi
    mkdir -p "$DIR/state" "$DIR/spool"
    DIR=$(cd "$DIR" && pwd)
    if [ -e "$DIR/slurm.conf" ]; then
        echo "slurm_local: Expected a folder without a cluster. Received: $DIR, which holds slurm.conf." \
             "Run 'bash scripts/slurm_local.sh stop $DIR' and remove it, or pass another folder." >&2
        exit 1
    fi
    trap 'stop >/dev/null' EXIT             # a start that fails leaves no daemon running
    dd if=/dev/urandom of="$DIR/munge.key" bs=1024 count=1 status=none
    chmod 600 "$DIR/munge.key"
    write_conf
    export SLURM_CONF=$DIR/slurm.conf
    # --force: munged refuses to run as root, or with a key outside /etc/munge, without it
    munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" --pid-file="$DIR/munged.pid" \
           --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed"
    wait_for munged "$DIR/munge.socket" "$DIR/munged.log"
    slurmctld -i
    wait_for slurmctld "$DIR/slurmctld.pid" "$DIR/slurmctld.log"
    slurmd -N localhost
    wait_for slurmd "$DIR/slurmd.pid" "$DIR/slurmd.log"
    local tries=0
    until sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; do
        tries=$((tries + 1))
        if [ "$tries" -gt 600 ]; then
            echo "slurm_local: the node did not become idle within 60 s: $(sinfo -h -N -o '%T %E' 2>&1)." \
                 "The logs $DIR/slurmctld.log and $DIR/slurmd.log say why." >&2
            exit 1
        fi
        sleep 0.1
    done
    trap - EXIT
    say "a one-node cluster runs; use it with: export SLURM_CONF=$SLURM_CONF"
}

stop() {
    [ -n "$DIR" ] || usage
    local name pid
    for name in slurmd slurmctld munged; do
        if [ -s "$DIR/$name.pid" ]; then
            pid=$(cat "$DIR/$name.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 300); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
        fi
    done
    say "stopped the cluster of $DIR"
}

case "$ACTION" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
