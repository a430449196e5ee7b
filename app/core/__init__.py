"""The engine: speculative decoding over llama-cpp-python. Imports no Qt, ever.

Layers, lowest first; a module imports only from its own package and from lower layers
(tests/core/test_layers.py holds this):

0. errors.py, params.py, lm.py: what every layer shares (the errors a user sees, the parameters,
   the Session and Vocabulary protocols the loop works against);
1. gguf/: GGUF files read without llama.cpp, and the tiny models the tests write;
2. llama/: llama.cpp through llama-cpp-python: backends, devices, layer placement, models and
   contexts, recurrent states, MTP contexts;
3. speculation/: the speculative loop, its drafters, policy, cost model, sampling and events;
   chat/: chat messages into prompt tokens (with the model's own template);
4. frontdoor.py: what every front end uses of an engine: the GenerationRequest, the LoadedPair
   and the AnswerEngine protocol;
5. remote/: an OpenAI-compatible server driven as an engine;
6. engine.py, pair_costs.py, compare.py, slot_files.py: a loaded pair answering, what its batches
   cost on this machine, answering twice to compare, and a server slot's cache saved to a file.
"""
