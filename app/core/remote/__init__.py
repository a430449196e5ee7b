"""An OpenAI-compatible server (llama-server, LM Studio, Ollama, another Quickdraft) driven as an
engine: its streamed answers become the same events, its metrics the same statistics. Imports the
foundation, chat and speculation's events."""
