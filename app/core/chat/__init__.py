"""Chat messages into prompt tokens: the model's own Jinja chat template, run under a deadline, with
the checks that keep a conversation's text from forging control tokens. Imports the foundation."""
