"""Property tests of the cancellation races: scripted steps on virtual time, six properties."""
