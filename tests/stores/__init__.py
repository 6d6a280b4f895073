"""The object stores: memory, folders, S3 on a real S3-compatible server."""
