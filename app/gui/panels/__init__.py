"""The side panels: live speculation statistics and charts, settings, the server, hardware status."""
