"""Quickdraft: a desktop chat app for local LLMs with speculative decoding."""

__version__ = "0.1.0"
