"""Persistence: conversations in SQLite, settings in JSON, both under the app's own directories."""
