"""Pages, options, the stored layout's codecs, redaction."""
