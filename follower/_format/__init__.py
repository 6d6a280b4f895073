"""The values on the wire and in the store: pages and states, the stored layout, the JSON
nesting limit, the agent card's endpoint.
"""
