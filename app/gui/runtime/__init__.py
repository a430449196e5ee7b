"""What runs behind the window: the worker thread that owns the engine, the controller that turns the
user's actions into its requests and its events into what the chat shows. Imports widgets only."""
