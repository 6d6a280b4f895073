"""The HTTP wing: one bounded exchange, the shared clients, the transports and the HTTP/1.1
codec.
"""
