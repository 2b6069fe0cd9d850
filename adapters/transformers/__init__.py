"""surecall on Hugging Face transformers: model loading, the decode loop and a logits processor.

Submodules are imported on use, so importing this package does not import torch.
"""
