"""Hostile input: garbage pages, stored garbage, limits, fuzzed answers and cards, echoed
secrets.
"""
