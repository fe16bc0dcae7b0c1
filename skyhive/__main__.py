from skyhive.cli import main

raise SystemExit(main())
