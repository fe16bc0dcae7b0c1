"""`python -m skyhive`: the command line (see `skyhive.cli`)."""

from skyhive.cli import main

raise SystemExit(main())
