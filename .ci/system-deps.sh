#!/usr/bin/env bash
# System packages the real-host tests need: OpenSSH server (sshd, ssh-keygen), iproute2 (ip) and
# Slurm (slurmctld, slurmd, the client commands, munge) for the Slurm provider's tests, and Chromium
# with its WebDriver (chromium, chromium-driver) for the dashboard's browser tests.
# Installs only what is missing, with apt-get, non-interactively, waiting for another apt/dpkg to finish
# (its locks) rather than giving up. Without root or apt-get it says why and exits 0: the tests that need
# these then skip with a reason. Under CI (CI=true) anything still missing at the end is an error (exit 1):
# a CI run that silently skips whole areas is not green.
set -euo pipefail

# how long apt-get waits for the dpkg lock, and how long this script retries while another apt holds a lock
LOCK_WAIT=${SYSTEM_DEPS_LOCK_WAIT:-600}

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

find_missing() {
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
}

find_missing
if [ "${#missing[@]}" -eq 0 ]; then
    echo "system-deps: sshd, ssh-keygen, ip, Slurm, rclone, fuse3, rsync and chromium are present; nothing to install"
    exit 0
fi

# not installable here: a reason, then exit 0 (the tests skip and say why) or, under CI, 1
give_up() {
    if [ "${CI:-}" = "true" ]; then
        echo "system-deps: ERROR under CI: $1; missing: ${missing[*]}" >&2
        exit 1
    fi
    echo "system-deps: $1; the tests that need ${missing[*]} will skip"
    exit 0
}

if [ "$(id -u)" -ne 0 ]; then
    give_up "not root, cannot install ${missing[*]}"
fi
if ! have apt-get; then
    give_up "apt-get not found, cannot install ${missing[*]}"
fi

# apt-get with the dpkg lock waited for (DPkg::Lock::Timeout) and, for the locks that option does not cover
# (the package lists' during update), retried while the error says another process holds a lock
apt() {
    local deadline=$((SECONDS + LOCK_WAIT)) out code
    while true; do
        code=0
        out=$(apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT" "$@" </dev/null 2>&1) || code=$?
        printf '%s\n' "$out"
        if [ "$code" -eq 0 ]; then
            return 0
        fi
        if grep -q "Could not get lock\|Unable to lock\|is held by process" <<<"$out" && [ "$SECONDS" -lt "$deadline" ]; then
            echo "system-deps: another apt holds a lock; waiting (up to ${LOCK_WAIT}s in all)"
            sleep 5
            continue
        fi
        return "$code"
    done
}

export DEBIAN_FRONTEND=noninteractive
echo "system-deps: installing ${missing[*]}"
apt update -q || give_up "apt-get update failed"
apt install -y -q --no-install-recommends "${missing[@]}" || give_up "apt-get install ${missing[*]} failed"
find_missing
if [ "${#missing[@]}" -ne 0 ]; then
    give_up "installed, yet still not found"
fi
echo "system-deps: done"
