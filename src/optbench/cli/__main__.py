"""`python -m optbench.cli`: the same as the `optbench` command."""

from optbench.cli import main

raise SystemExit(main())
