"""The public face, the packaging and the testing kit."""
