"""Small GPT/Llama models, byte-level data from a real corpus, and the training loop."""
