"""What tests of every kind share: fake agents, clocks, profiles, and readers of stored steps."""
