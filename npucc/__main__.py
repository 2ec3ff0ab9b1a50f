"""`python -m npucc`."""

import sys

from npucc.tools.cli import main

sys.exit(main())
