"""Small GPT/Llama models, byte-level data from a real corpus, and the training loop."""

CORPORA = ("python-stdlib", "shakespeare")  # scape.train.data reads them (kept torch-free here)
