"""Write-once object stores behind one async protocol: the library's stores in one place.

The protocol and the rules every store keeps are in ``_protocol``; the
stores in ``_memory`` and ``_filesystem`` (S3's in ``_s3``, apart:
it needs boto3).
"""

from ._filesystem import FilesystemStore as FilesystemStore
from ._memory import MemoryStore as MemoryStore
from ._protocol import ObjectStore as ObjectStore
from ._protocol import check_same_bytes as check_same_bytes
from ._protocol import check_start_after as check_start_after
from ._protocol import folder_version as folder_version
from ._protocol import list_keys as list_keys
from ._temps import TEMP_NAME as TEMP_NAME
