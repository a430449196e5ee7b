"""The engine: speculative decoding over llama-cpp-python. Imports no Qt, ever."""
