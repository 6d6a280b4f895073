"""Reading one task: the read loop, and the sync policy that tells it what each read's outcome
means.
"""
