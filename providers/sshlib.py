"""asyncssh, imported without its dependency's deprecation warnings reaching skyhive's users.

cryptography 51 deprecated DSA, and asyncssh (2.24) touches ``cryptography``'s DSA names while its modules
load: ten ``CryptographyDeprecationWarning: DSA is deprecated`` lines on stderr in every process that
imports it, which every ``skyhive`` command on an SSH pool, and a user's own script, would print. skyhive
never offers DSA keys. That one warning is ignored for that one import, nothing broader: the process's
warning filters are as they were afterwards. Everything in skyhive imports asyncssh from here::

    from skyhive.providers.sshlib import asyncssh
"""

from __future__ import annotations

import warnings

from cryptography.utils import CryptographyDeprecationWarning

#: the message of the one warning ignored (a regular expression matched at its start, as warnings does)
DSA_DEPRECATED = r"DSA is deprecated"

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=DSA_DEPRECATED, category=CryptographyDeprecationWarning)
    import asyncssh

__all__ = ["asyncssh"]
