"""llama.cpp, through llama-cpp-python: the only package that touches ``llama_cpp``. library.py starts
it once (backend modules from backends.py), devices.py says what it runs on, placement.py where a
model's layers go, binding.py loads models and contexts and decodes (model_load.py: a model's
llama.cpp parameters, a load that can be cancelled, why one failed), threads.py learns each
context's thread count (deadline.py stops a decode on trial past its deadline), recurrent.py saves
and restores recurrent states, mtp.py the MTP drafting contexts (llama.cpp's staging API), eagle3.py
and dflash.py the drafters over the main model's hidden states, seq_file.py a sequence's cache in
llama.cpp's own state file (a server slot's, saved and restored), ram.py this machine's memory.
Imports the foundation and gguf."""
