"""The models and their tokenizers: the built-in GPT, Hugging Face causal LMs, the byte and
BPE tokenizers, chat templates, and `build.py`, which builds what a model source names."""
