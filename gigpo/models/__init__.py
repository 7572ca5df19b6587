"""Models gigpo can load without a model hub: local builds (`local`), GGUF conversions of pinned PyPI
wheels (`pretrained`), their shared cache (`cache`), `model.path`/`model.init` resolution (`resolve`) and
chat templates (`chat_template`). Submodules import only downwards: cache <- local, pretrained <- resolve."""
