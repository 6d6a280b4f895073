"""The A2A client and turns, and the agent card."""
