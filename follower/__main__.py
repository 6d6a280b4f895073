"""``python -m follower``: the command line."""

import sys

from ._cli import main

sys.exit(main())
