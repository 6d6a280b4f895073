"""Storing to S3 and S3-compatible services: :class:`S3Store` (the ``s3`` extra, on boto3).

``import follower`` never needs boto3; this module does.
"""

from ._stores._s3 import S3Store as S3Store

__all__ = ("S3Store",)

# Reprs, tracebacks and docs name the public path.
S3Store.__module__ = __name__
