"""``python -m follower``: the command line."""

import sys

from ._cli._main import main

sys.exit(main())
