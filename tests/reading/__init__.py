"""The read loop and its policy: retries, logs, memory over long runs."""
