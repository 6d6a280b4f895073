"""A turn as it is stored and read back: the chunks and links written, the stored turn, the
reader.
"""
