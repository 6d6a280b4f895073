"""How to install one of follower's extras, said the same way by every hint that names one.

follower is not published: it installs from a checkout of its repository, where
``pip install 'follower[...]'`` finds nothing. Once it is published, this is the one place
that changes.
"""

from __future__ import annotations


def install_hint(extras: str) -> str:
    """The command that installs ``extras`` (comma-separated), e.g. ``install_hint("s3")``."""
    return f"pip install '.[{extras}]' in a checkout of follower"
