#!/usr/bin/env bash
# What the device machine offers for confine.py: cgroup v2 delegation, util-linux tools,
# and a CUDA call inside the unshare layout (confine_mounts.py) with capabilities dropped.
set -u
echo "cgroup: $(cat /proc/self/cgroup)"
root=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
echo "controllers: $(cat $root/cgroup.controllers 2>&1) | subtree: $(cat $root/cgroup.subtree_control 2>&1)"
echo "+memory +pids" > $root/cgroup.subtree_control 2>&1 && echo "subtree enable: ok" || echo "subtree enable: FAILED"
mkdir $root/kw-probe && echo 1073741824 > $root/kw-probe/memory.max && echo 64 > $root/kw-probe/pids.max && echo "child cgroup: ok"; rmdir $root/kw-probe 2>/dev/null
which bwrap unshare setpriv prlimit; unshare --version
mkdir -p /tmp/kwprobe/s
setpriv --pdeathsig KILL -- unshare --pid --fork --kill-child --mount --net --ipc --uts --mount-proc --propagation private -- \
  python3 -I kernelwright/confine_mounts.py /tmp/kwprobe/s -- \
  setpriv --bounding-set -all --inh-caps -all --ambient-caps -all --no-new-privs -- \
  sh -c 'grep CapEff /proc/self/status; touch /etc/kwx 2>&1; echo ok > /tmp/kwprobe/s/f && echo scratch-ok; python3 -c "import torch; x=torch.ones(4,device=\"cuda\"); print(\"cuda inside:\", float(x.sum()))" 2>&1 | tail -1'
echo rc=$?
