"""``python -m loopx``."""

import sys

from loopx.cli import main

sys.exit(main())
