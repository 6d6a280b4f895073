"""What a step stores and how it is read back."""
