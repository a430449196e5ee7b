"""Chat messages into prompt tokens: the model's own Jinja chat template, run under a deadline, with
the checks that keep a conversation's text from forging control tokens; a thinking model's reasoning
markers and its output cut into reasoning and answer (reasoning.py); a tool conversation's messages
(messages.py), the tool-call format a template shows and the opening of a call (tools.py), calls read
from an answer whole or streamed (toolcalls.py, per format: toolformats.py), the grammar of a forced
call (toolgrammar.py). Imports the foundation, and llama's grammar module (llama.cpp's JSON-Schema
converter) for the forced call's arguments."""
