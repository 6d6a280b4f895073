"""The command line, the shell above the library: each command, its grammar, its exit codes and
its output.
"""
