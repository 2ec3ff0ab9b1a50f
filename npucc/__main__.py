"""`python -m npucc`."""

import sys

from npucc.cli import main

sys.exit(main())
