#!/usr/bin/env bash
# A one-machine SLURM cluster on loopback, to try profiles/slurm without a cluster:
#
#   sudo scripts/slurm-local.sh            # install (Debian/Ubuntu packages), configure, start
#   snakemake --profile profiles/slurm --slurm-status-command squeue --config scale=smoke device=cpu -- papers/fedssd/table2
#   sudo scripts/slurm-local.sh --stop     # stop the daemons again
#
# What it does, step by step (each step is skipped when already done, so a second call on a
# running cluster returns in about a second):
#   1. apt-get install munge slurmctld slurmd slurm-client (Debian's SLURM, 22.05 on bookworm);
#   2. a munge key, then munged;
#   3. /etc/slurm/slurm.conf: one node (this host, at 127.0.0.1) with all its CPUs and 90% of
#      its memory, one default partition `main`; no accounting database (the executor plugin
#      then reads job states with squeue: pass --slurm-status-command squeue, and MinJobAge is
#      600 s so that finished jobs stay visible to it); no cgroups (linuxproc, works in
#      containers); a job past its time limit is killed (OverTimeLimit 0, KillWait 5 s);
#      GPUs as a generic resource: the machine's NVIDIA GPUs, or, without any, 2 pretend ones
#      (a count only, SLURM_LOCAL_GPUS=N to choose) so that jobs asking --gpus=1 can be tried:
#      they run on the CPU;
#   4. slurmctld and slurmd as background daemons (no systemd needed), then waits until the
#      node is idle.
# On a real cluster none of this is needed: adjust profiles/slurm/config.yaml instead.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
LOG_DIR=/var/log/slurm
SPOOL=/var/spool/slurm
HOST=$(hostname -s)

log() { echo "slurm-local: $*" >&2; }

stop() {
    for daemon in slurmd slurmctld; do
        if [[ -f /run/$daemon.pid ]] && kill -0 "$(cat /run/$daemon.pid)" 2>/dev/null; then
            pid=$(cat /run/$daemon.pid)
            kill "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            log "stopped $daemon"
        fi
    done
}

answers() { timeout 10 sinfo -h -o %T >/dev/null 2>&1; }

if [[ "${1:-}" == "--stop" ]]; then
    stop
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "run as root (it installs packages and starts daemons)" >&2
    exit 1
fi

# 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
        || ! command -v sbatch >/dev/null; then
    log "installing munge, slurmctld, slurmd, slurm-client"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
fi

# 2. munge
if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge && chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# 3. slurm.conf (rewritten only when it changes; the daemons are restarted then)
CPUS=$(nproc)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    GPUS=${SLURM_LOCAL_GPUS:-$(nvidia-smi -L | wc -l)}
    GRES_FILE="File=/dev/nvidia[0-$((GPUS - 1))]"
else  # stand-in device files: SLURM counts a GPU per file
    GPUS=${SLURM_LOCAL_GPUS:-2}
    mkdir -p /run/slurm-local
    for ((i = 0; i < GPUS; i++)); do touch /run/slurm-local/gpu$i; done
    GRES_FILE="File=/run/slurm-local/gpu[0-$((GPUS - 1))]"
fi
MEMORY_MB=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
mkdir -p "$CONF_DIR" "$LOG_DIR" "$SPOOL/ctld" "$SPOOL/d"
cat > "$CONF.new" <<EOF
# Written by scripts/slurm-local.sh: a one-node cluster on loopback.
ClusterName=fedrepro-local
SlurmctldHost=$HOST(127.0.0.1)
AuthType=auth/munge
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
OverTimeLimit=0
KillWait=5
InactiveLimit=0
MessageTimeout=20
MailProg=/bin/true
GresTypes=gpu
SlurmdTimeout=120
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEMORY_MB Gres=gpu:$GPUS State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
echo "NodeName=$HOST Name=gpu Count=$GPUS $GRES_FILE" > "$CONF_DIR/gres.conf.new"
restart=0
if ! cmp -s "$CONF_DIR/gres.conf.new" "$CONF_DIR/gres.conf"; then
    mv "$CONF_DIR/gres.conf.new" "$CONF_DIR/gres.conf"
    restart=1
else
    rm "$CONF_DIR/gres.conf.new"
fi
if ! cmp -s "$CONF.new" "$CONF"; then
    mv "$CONF.new" "$CONF"
    restart=1
else
    rm "$CONF.new"
fi

running() { [[ -f /run/$1.pid ]] && kill -0 "$(cat /run/$1.pid)" 2>/dev/null; }
if [[ $restart == 1 ]]; then
    stop
fi

# 4. daemons
if ! running slurmctld; then
    log "starting slurmctld"
    if [[ $restart == 1 ]]; then
        /usr/sbin/slurmctld -c  # a new configuration: forget the old node state and jobs
    else
        /usr/sbin/slurmctld -i
    fi
fi
if ! running slurmd; then
    log "starting slurmd"
    /usr/sbin/slurmd
fi
for _ in $(seq 120); do
    if answers && [[ $(sinfo -h -n "$HOST" -o %T 2>/dev/null) =~ ^(idle|mixed|allocated) ]]; then
        break
    fi
    sleep 0.5
done
if ! answers; then
    log "slurmctld does not answer; see $LOG_DIR/slurmctld.log"
    exit 1
fi
state=$(sinfo -h -n "$HOST" -o %T)
if [[ ! $state =~ ^(idle|mixed|allocated) ]]; then
    scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true
    sleep 1
    state=$(sinfo -h -n "$HOST" -o %T)
fi
log "node $HOST: $state, $CPUS CPUs, $MEMORY_MB MB, $GPUS GPUs (partition main)"
