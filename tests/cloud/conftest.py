"""tests/cloud: where no ``shared/catalogs`` folder is beside the checkout (a fresh clone), the generator's
tests read the copies in tests/cloud/catalogs (byte-for-byte the shared files, see its README), so they run
instead of being skipped. Set before the test modules are imported: their skip conditions read it."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_CATALOGS = Path(__file__).resolve().parents[2].parent / "shared" / "catalogs"
COPIES = Path(__file__).resolve().parent / "catalogs"

if not os.environ.get("SKYHIVE_CATALOGS") and not SHARED_CATALOGS.is_dir():
    os.environ["SKYHIVE_CATALOGS"] = str(COPIES)
