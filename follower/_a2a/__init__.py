"""A2A: the JSON-RPC client, and above it the turn that sends a message and follows its task."""
