"""GGUF files without llama.cpp: the header and metadata reader, what a file says about its model and
whether two models can pair (info), the tokens two vocabularies share (shared_vocab), and the tiny
random-weight models the tests and demos write.
Imports only the foundation (app.core.errors, params)."""
