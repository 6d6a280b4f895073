"""The command line, run as a user runs it."""
