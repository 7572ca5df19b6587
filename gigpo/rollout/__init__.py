"""Generation backends (HF, vLLM engine, vLLM server) behind one interface, with weight sync."""
