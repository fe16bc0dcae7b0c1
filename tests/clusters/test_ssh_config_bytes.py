"""`skyhive ssh-config --install/--remove` keep the user's `~/.ssh/config` byte for byte (issue 36, point 10):
only skyhive's own lines are added and taken out — a symlinked config (a dotfile manager's) stays a
symlink and the file it points to is edited (atomically), CRLF line endings and a missing final newline
are kept, a Latin-1 byte is no error, and an error names the file. OpenSSH's own `ssh -G` checks that
the edited file still works."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.clusters.test_access import _effective, fake_pool  # noqa: F401 - `fake_pool` is a fixture
from tests.clusters.test_clusters import skyhive

MARK = b"# skyhive: named pools' SSH entries (`skyhive ssh-config --remove` takes this out)"


def include(home: str) -> bytes:
    return f"Include {home}/ssh/*.config".encode()


def round_trip(config: Path, original: bytes, cwd: Path) -> bytes:
    """`--install`, the bytes it left, then `--remove`: the user's bytes exactly again."""
    done = skyhive("ssh-config", "--install", "-y", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = config.read_bytes()
    assert installed.endswith(original)
    assert skyhive("ssh-config", "--install", cwd=cwd).returncode == 0  # again: nothing changes
    assert config.read_bytes() == installed
    done = skyhive("ssh-config", "--remove", cwd=cwd)  # (exit 1: it then warns that `ssh train` is unknown)
    assert "removed skyhive's Include line" in done.stdout, done.stdout + done.stderr
    assert config.read_bytes() == original
    return installed


def test_a_symlinked_config_stays_a_symlink_and_its_target_is_edited(fake_pool, skyhive_home, tmp_path):
    rec, config = fake_pool
    dotfiles = tmp_path / "home" / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "ssh_config"
    original = b"Host github.com\n  User git\n"
    target.write_bytes(original)
    os.chmod(target, 0o640)
    config.parent.mkdir(mode=0o700)
    config.symlink_to("../dotfiles/ssh_config")  # relative, as dotfile managers make them

    installed = round_trip(config, original, tmp_path)
    assert installed == MARK + b"\n" + include(skyhive_home) + b"\n\n" + original
    assert config.is_symlink() and os.readlink(config) == "../dotfiles/ssh_config"
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert sorted(p.name for p in dotfiles.iterdir()) == ["ssh_config"]  # no temporary file left
    assert sorted(p.name for p in config.parent.iterdir()) == ["config"]

    skyhive("ssh-config", "--install", "-y", cwd=tmp_path)  # installed through the link, OpenSSH follows it
    assert config.is_symlink() and target.read_bytes().startswith(MARK)
    worker = _effective(config, "train-worker1")
    assert (worker["hostname"], worker["user"]) == ("10.9.9.6", "alice")
    assert "removed" in skyhive("ssh-config", "--remove", cwd=tmp_path).stdout
    assert config.is_symlink() and target.read_bytes() == original


def test_crlf_line_endings_and_a_missing_final_newline_are_kept(fake_pool, skyhive_home, tmp_path):
    rec, config = fake_pool
    config.parent.mkdir(mode=0o700)
    original = b"Host github.com\r\n  User git\r\n\r\nHost *\r\n  ServerAliveInterval 30"  # no final newline
    config.write_bytes(original)
    installed = round_trip(config, original, tmp_path)
    assert installed == MARK + b"\r\n" + include(skyhive_home) + b"\r\n\r\n" + original  # ours in its endings


def test_a_latin1_byte_is_kept_and_no_error(fake_pool, skyhive_home, tmp_path):
    rec, config = fake_pool
    config.parent.mkdir(mode=0o700)
    original = b"# Ren\xe9's hosts\nHost github.com\n  User git\n"  # Latin-1, not UTF-8
    config.write_bytes(original)
    done = skyhive("ssh-config", "--install", "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = skyhive("ssh-config", "train", cwd=tmp_path)  # reads the file for what would override ours
    assert listed.returncode == 0 and "train: " in listed.stdout and "warning" not in listed.stderr, listed.stderr
    assert _effective(config, "train")["port"] == "2222"
    done = skyhive("ssh-config", "--remove", cwd=tmp_path)
    assert "removed" in done.stdout and config.read_bytes() == original, done.stderr


def test_errors_name_the_file(fake_pool, tmp_path):
    rec, config = fake_pool
    config.parent.mkdir(mode=0o700)
    config.mkdir()  # not a file
    done = skyhive("ssh-config", "--install", "-y", cwd=tmp_path)
    assert done.returncode == 1
    assert f"skyhive: error: [Errno 21] cannot read your SSH config {config}: Is a directory" in done.stderr
    config.rmdir()
    missing = tmp_path / "home" / "gone" / "ssh_config"
    config.symlink_to(missing)  # a symlink whose target's folder is gone
    done = skyhive("ssh-config", "--install", "-y", cwd=tmp_path)
    assert done.returncode == 1
    assert (f"cannot write your SSH config {config} (the file its symlink points to, {missing}): No such file or "
            "directory") in done.stderr, done.stderr
    assert config.is_symlink() and not missing.parent.exists()


def test_a_new_config_is_private_and_nothing_is_left_beside_it(fake_pool, skyhive_home, tmp_path):
    rec, config = fake_pool
    done = skyhive("ssh-config", "--install", "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_bytes() == MARK + b"\n" + include(skyhive_home) + b"\n\n"
    assert oct(config.stat().st_mode & 0o777) == "0o600" and oct(config.parent.stat().st_mode & 0o777) == "0o700"
    assert "removed" in skyhive("ssh-config", "--remove", cwd=tmp_path).stdout
    assert config.read_bytes() == b"" and sorted(p.name for p in config.parent.iterdir()) == ["config"]
    subprocess.run(["ssh", "-G", "-F", str(config), "x"], check=True, capture_output=True, timeout=30)
