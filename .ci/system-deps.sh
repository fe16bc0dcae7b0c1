#!/usr/bin/env bash
# System packages the real-host tests need: OpenSSH server (sshd, ssh-keygen), iproute2 (ip) and
# Slurm (slurmctld, slurmd, the client commands, munge) for the Slurm provider's tests, and Chromium
# with its WebDriver (chromium, chromium-driver) for the dashboard's browser tests.
# Installs only what is missing, with apt-get, non-interactively. Without root or apt-get it says
# why and exits 0: the tests that need these then skip with a reason.
set -euo pipefail

# an executable on PATH (bash's `command -v` also names non-executable files) or at one of the paths given
have() {
    local name=$1 path
    shift
    path=$(command -v "$name" 2>/dev/null) && [ -x "$path" ] && [ -f "$path" ] && return 0
    for path in "$@"; do
        [ -x "$path" ] && [ -f "$path" ] && return 0
    done
    return 1
}

missing=()
if ! have sshd /usr/sbin/sshd; then
    missing+=(openssh-server)
fi
if ! have ssh-keygen /usr/bin/ssh-keygen; then
    # ssh-keygen comes with openssh-client, a dependency of openssh-server
    [[ " ${missing[*]-} " == *" openssh-server "* ]] || missing+=(openssh-client)
fi
if ! have ip /usr/sbin/ip /sbin/ip; then
    missing+=(iproute2)
fi

if ! have slurmctld /usr/sbin/slurmctld; then
    missing+=(slurmctld)
fi
if ! have slurmd /usr/sbin/slurmd; then
    missing+=(slurmd)
fi
if ! have sbatch /usr/bin/sbatch; then
    missing+=(slurm-client)
fi
if ! have munged /usr/sbin/munged; then
    missing+=(munge)
fi
if ! have rsync /usr/bin/rsync; then
    missing+=(rsync)  # tests/clusters/test_access.py: rsync through a named pool's generated SSH entry
fi
# bucket mounts with mode MOUNT (FUSE): rclone and fusermount3 (tests/storage/test_storage.py skips without)
if ! have rclone /usr/bin/rclone; then
    missing+=(rclone)
fi
if ! have fusermount3 /usr/bin/fusermount3; then
    missing+=(fuse3)
fi

if ! have chromium /usr/bin/chromium; then
    missing+=(chromium)
fi
if ! have chromedriver /usr/bin/chromedriver; then
    missing+=(chromium-driver)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    echo "system-deps: sshd, ssh-keygen, ip, Slurm, rclone, fuse3, rsync and chromium are present; nothing to install"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "system-deps: not root, cannot install ${missing[*]}; the real-sshd/namespace/Slurm tests will skip"
    exit 0
fi
if ! have apt-get; then
    echo "system-deps: apt-get not found, cannot install ${missing[*]}; the real-sshd/namespace/Slurm tests will skip"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
echo "system-deps: installing ${missing[*]}"
apt-get update -q </dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
echo "system-deps: done"
