"""`python -m statetrack.cli ...`: the command line."""

import sys

from statetrack.cli.program import main

sys.exit(main())
