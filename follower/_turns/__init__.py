"""A step's turns: the sync ledger of their lifecycle, the async block that carries it out, the
step.
"""
