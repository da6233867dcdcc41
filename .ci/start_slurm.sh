#!/usr/bin/env bash
# Start a single-node Slurm on this machine from the system's packages (Debian: slurm-wlm, munge),
# for the test that runs the paper's sweep as a job array (tests/test_slurm.py). Run as root.
#
# One node (this host, with the CPUs and memory `slurmd -C` finds), one partition "debug", no
# accounting database (sacct has nothing to say: the sweep's driver must tell a gone job from
# squeue alone, as on many small clusters), no cgroups (processes tracked by their parent ids).
# Idempotent: when the controller answers and the node is up, it does nothing.
#
#   .ci/start_slurm.sh            # configure and start (installs nothing; see .ci/run)
#   .ci/start_slurm.sh --check    # exit 0 when a Slurm with partition "debug" answers, 1 otherwise
set -euo pipefail

CONF_DIR=/etc/slurm
STATE_DIR=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm

slurm_answers() {
  # the controller answers and the node of partition "debug" takes jobs
  scontrol ping 2>/dev/null | grep -q "UP" || return 1
  sinfo -h -p debug -o "%t" 2>/dev/null | grep -Eq "^(idle|mix|alloc)"
}

if [ "${1:-}" = "--check" ]; then
  command -v scontrol >/dev/null 2>&1 && slurm_answers && exit 0
  exit 1
fi

for tool in slurmctld slurmd munged scontrol sinfo; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    echo "start_slurm: $tool is missing (install slurm-wlm and munge)" >&2
    exit 2
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "start_slurm: the daemons need root" >&2
  exit 2
fi
if slurm_answers; then
  echo "start_slurm: Slurm is already running"
  exit 0
fi

# munge: the key the daemons and the commands authenticate with
if [ ! -s /etc/munge/munge.key ]; then
  /usr/sbin/mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
    || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! pgrep -u munge -x munged >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
fi
for _ in $(seq 20); do munge -n >/dev/null 2>&1 && break; sleep 0.5; done

# slurm.conf: this host as the one node, with what slurmd finds on it
HOST=$(hostname -s)
NODE=$(slurmd -C | head -n 1)                 # NodeName=<host> CPUs=... RealMemory=...
CPUS=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$NODE")
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$NODE")
mkdir -p "$CONF_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR"
cat >"$CONF_DIR/slurm.conf" <<EOF
# single-node Slurm written by .ci/start_slurm.sh
ClusterName=single
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=300
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

pgrep -x slurmctld >/dev/null 2>&1 || slurmctld
pgrep -x slurmd >/dev/null 2>&1 || slurmd
for _ in $(seq 60); do
  if slurm_answers; then
    echo "start_slurm: Slurm is up: node $HOST ($CPUS CPUs, $MEM MB), partition debug"
    exit 0
  fi
  # a node that came back from an earlier run may need a word
  scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "start_slurm: Slurm did not come up; see $LOG_DIR/slurmctld.log and $LOG_DIR/slurmd.log" >&2
exit 1
