"""`python -m autokernel`: the command line (autokernel.cli)."""

import autokernel.cli as cli

cli.main()
