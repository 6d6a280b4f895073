"""Whole stories: the production incident, the 3.11 wait_for race, the fault matrix."""
