"""The conversation: its list, the messages as they stream in, the composer."""
