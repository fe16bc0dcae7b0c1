"""A dependency's warnings are not the user's problem: asyncssh's import under cryptography ≥ 51 prints ten
`CryptographyDeprecationWarning: DSA is deprecated` lines, and skyhive imports it (providers/sshlib.py) so
that none reaches a `skyhive` command on an SSH pool or a user's own script. The test first shows that the
installed asyncssh does warn when imported bare, so it cannot pass for want of the warning."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.clusters.test_clusters import skyhive
from tests.clusters.test_ssh_clusters import TASK, two_hosts  # noqa: F401 - a fixture
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.slow]

WARNING = "CryptographyDeprecationWarning"


def test_the_installed_asyncssh_warns_when_imported_bare():
    bare = subprocess.run([sys.executable, "-c", "import asyncssh"], capture_output=True, text=True, timeout=60)
    if WARNING not in bare.stderr:
        pytest.skip("this environment's cryptography does not deprecate DSA: nothing to filter (the lock pins "
                    "cryptography 51, which does)")
    assert "DSA is deprecated" in bare.stderr
    quiet = subprocess.run([sys.executable, "-c", "from skyhive.providers.sshlib import asyncssh; "
                                                  "import warnings; print(len(warnings.filters))"],
                           capture_output=True, text=True, timeout=60)
    assert quiet.stderr == "", quiet.stderr
    plain = subprocess.run([sys.executable, "-c", "import warnings; print(len(warnings.filters))"],
                           capture_output=True, text=True, timeout=60)
    assert quiet.stdout == plain.stdout  # nothing broader: the filters are as they were


def test_skyhive_commands_and_a_users_script_on_an_ssh_pool_print_no_dependency_warning(two_hosts, tmp_path):
    import io

    from skyhive.runtime.control.pools import launch_cluster
    from skyhive.runtime.commands.taskfile import loads

    hosts = two_hosts
    task = loads(textwrap.dedent(TASK), cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "quiet", provider=ssh_for(hosts), out=out, err=out) == 0, out.getvalue()
    (tmp_path / "again.yaml").write_text("run: echo again on $(hostname)\n")
    for args in (["status", "quiet"], ["exec", "quiet", "again.yaml"], ["queue", "quiet"],
                 ["ssh", "quiet", "--", "hostname"], ["logs", "quiet", "1"], ["down", "quiet", "-y"]):
        done = skyhive(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        assert WARNING not in done.stderr and "DSA" not in done.stderr, (args, done.stderr)
    script = tmp_path / "user.py"
    h = hosts[0]
    script.write_text(textwrap.dedent(f"""
        import skyhive as sky
        provider = sky.SSH(hosts=[{f"{h.user}@{h.host}:{h.port}"!r}], key={str(h.client_key)!r},
                           known_hosts={str(h.known_hosts_path)!r})
        with sky.Pool(provider=provider, nodes=1, output=None) as pool:
            print(pool.run(sum, [1, 2, 3]))
        """))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "6", done.stderr
    assert WARNING not in done.stderr, done.stderr
