"""Runs ON THE NODE, with the node's Python and only its standard library (sent as `python -c`).

    python -c "$(this file)" '{"action": "runtime" | "env", ...}'

Output protocol (stdout, line by line): `::step NAME` when a step starts, `::cached` when the
directory was already complete, `::done JSON` at the end, `::error STEP: MESSAGE` before a non-zero
exit; anything else is the output of the commands run. stdin is a lifeline: when it closes (the
client went away or cancelled), the command being run is killed (each runs in a process group of its
own), the directory being built is removed — a cancelled bootstrap leaves no half-built environment —
and then the whole process group is killed.

- action "runtime": unpack the wheels in `src` into `dir` (`.ready` written last; atomic rename).
- action "env": under an exclusive lock on `dir.lock`, unless `dir/.ready` exists: move uploaded
  includes from `incoming` to `dir/files`, create a venv and pip-install the image's packages with
  its indexes and find-links, install apt packages (root or passwordless sudo), run the setup
  commands in order (cwd `dir/files` or `dir`), then write `dir/.ready`. A failed build removes `dir`.

Everything the script makes is private (umask 077: directories 0700, files 0600, executables 0700;
the uploaded includes lose their group and other bits). The apt and setup commands keep the login's
own umask: they are the user's commands (and apt installs for the whole machine).
"""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def fail(step, message, code=3):
    say(f"::error {step}: {message}")
    sys.exit(code)


#: What the lifeline undoes: the running command (its process group) and the directories being built.
RUNNING = []
BUILDING = []


def lifeline():
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    try:
        for proc in list(RUNNING):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for path in list(BUILDING):
            shutil.rmtree(path, ignore_errors=True)
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(137)


#: the umask the script was started with (main() sets 077 for what the script itself makes)
LOGIN_UMASK = None


def run(step, argv, *, cwd=None, env=None, shell=False, umask=-1):
    """Run a command, streaming its output; on failure stop with its last lines in the error.
    `umask`: the command's (-1: the script's own, 077)."""
    tail = []
    proc = subprocess.Popen(argv, cwd=cwd, env=env, shell=shell, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            umask=umask)
    RUNNING.append(proc)
    try:
        tail = _stream(proc, tail)
    finally:
        RUNNING.remove(proc)
    code = proc.wait()
    if code != 0:
        fail(step, f"exit status {code}; last output:\n" + "\n".join(tail))


def _stream(proc, tail):
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        say(line)
        tail.append(line)
        del tail[:-40]
    return tail


def runtime(spec):
    final, src = spec["dir"], spec["src"]
    if os.path.exists(os.path.join(final, ".ready")):
        say("::cached")
        return
    say("::step unpack")
    tmp = f"{final}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in sorted(os.listdir(src)):
        if name.endswith(".whl"):
            with zipfile.ZipFile(os.path.join(src, name)) as zf:
                zf.extractall(tmp)
    import compileall

    compileall.compile_dir(tmp, quiet=2)
    with open(os.path.join(tmp, ".ready"), "w") as fh:
        fh.write(json.dumps({"created": time.time()}))
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another bootstrap finished first
        if not os.path.exists(os.path.join(final, ".ready")):
            raise
    shutil.rmtree(src, ignore_errors=True)


def env(spec):
    final = spec["dir"]
    os.makedirs(os.path.dirname(final), exist_ok=True)
    lock = open(final + ".lock", "w")
    say("::step lock")
    fcntl.flock(lock, fcntl.LOCK_EX)
    incoming = spec.get("incoming")
    if os.path.exists(os.path.join(final, ".ready")):
        if incoming:
            shutil.rmtree(incoming, ignore_errors=True)
        say("::cached")
        return
    shutil.rmtree(final, ignore_errors=True)
    BUILDING.extend(p for p in (final, incoming) if p)
    os.makedirs(final)
    ok = False
    try:
        build(spec, final, incoming)
        ok = True
    finally:
        if not ok:
            shutil.rmtree(final, ignore_errors=True)
        if incoming:
            shutil.rmtree(incoming, ignore_errors=True)
        BUILDING.clear()


def build(spec, final, incoming):
    started = time.time()
    environ = dict(os.environ)
    files = os.path.join(final, "files")
    if incoming and os.path.isdir(incoming):
        say("::step includes")
        os.rename(incoming, files)
        private(files)
    venv = os.path.join(final, "venv")
    if spec["pip"]:
        say("::step venv")
        run("venv", [spec["python"], "-m", "venv", venv])
        say("::step pip")
        argv = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check",
                "--no-input", "--progress-bar", "off"]
        indexes = spec["pip_indexes"]
        if indexes:
            argv += ["--index-url", indexes[0]]
            for url in indexes[1:]:
                argv += ["--extra-index-url", url]
        for link in spec["find_links"]:
            argv += ["--find-links", link]
        run("pip", argv + list(spec["pip"]))
        # venv and pip set modes of their own whatever the umask (pip: 0o777 & ~umask | 0o111 for a wheel's
        # executables, its scripts 0755; venv's activate scripts 0644): the environment is made private
        private(venv)
        environ["PATH"] = os.path.join(venv, "bin") + os.pathsep + environ.get("PATH", "")
        environ["VIRTUAL_ENV"] = venv
    if spec["apt"]:
        say("::step apt")
        if os.geteuid() == 0:
            prefix = []
        elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], stdin=subprocess.DEVNULL,
                                                     capture_output=True).returncode == 0:
            prefix = ["sudo", "-n"]
        else:
            fail("apt", f"installing {', '.join(spec['apt'])} needs root or passwordless sudo, and user "
                        f"{os.environ.get('USER', os.getuid())} has neither")
        aenv = dict(environ, DEBIAN_FRONTEND="noninteractive")
        run("apt", prefix + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *spec["apt"]], env=aenv,
            umask=LOGIN_UMASK)
    cwd = files if os.path.isdir(files) else final
    for i, command in enumerate(spec["setup"]):
        say(f"::step setup {i + 1}/{len(spec['setup'])}")
        run(f"setup command {i + 1} ({command})", command, cwd=cwd, env=environ, shell=True, umask=LOGIN_UMASK)
    info = {"created": time.time(), "seconds": round(time.time() - started, 3), "venv": bool(spec["pip"])}
    with open(os.path.join(final, ".ready"), "w") as fh:
        fh.write(json.dumps(info))
    say("::done " + json.dumps(info))


def private(root):
    """Take the group and other bits off everything under `root` (copies of the user's files keep
    their modes on the way here: uploaded by SFTP, or copied for a Local node)."""
    for where, dirs, names in os.walk(root):
        for path in [where] + [os.path.join(where, n) for n in dirs + names]:
            st = os.lstat(path)
            if not os.path.islink(path) and st.st_mode & 0o077:
                os.chmod(path, st.st_mode & 0o700)


def main():
    global LOGIN_UMASK
    LOGIN_UMASK = os.umask(0o077)
    threading.Thread(target=lifeline, daemon=True).start()
    spec = json.loads(sys.argv[1])
    if spec["action"] == "runtime":
        runtime(spec)
    else:
        env(spec)


if __name__ == "__main__":
    main()
