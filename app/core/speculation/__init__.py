"""Speculative decoding itself: the loop (draft, verify, accept, roll back), the drafters (a draft model
of another vocabulary among them: crossvocab), the draft policy with its cost model and acceptance
model, the sampler and its acceptance rule, a grammar over the main model's distribution (constraint.py), the events a generation yields and the statistics and rates
read off them. Works against app.core.lm's Session protocol; imports the foundation, gguf and llama
(only for types and MTP heads)."""
