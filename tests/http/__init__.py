"""The HTTP wing: exchanges, the transports, the codec, credentials on the wire."""
