"""How a model is cut across GPUs: pipeline stages, layer shapes
(DESIGN section 10; ../shared/simulator-layout.md)."""
