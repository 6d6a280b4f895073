"""The documentation: its examples run and type-check, its tables match the code, the site
works offline.
"""
