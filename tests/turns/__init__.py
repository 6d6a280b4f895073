"""A step's turns: the ledger, the turn block, resume, hand-off, cancels, statistics."""
