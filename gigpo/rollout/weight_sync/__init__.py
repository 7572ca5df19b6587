"""Weight sync: the trainer's weights into the generator, for every backend, in sync and async modes.

One package, because one file would hold five jobs (about 600 lines):
- `tensors.py`: what is sent: the trainer's tensors under the engine's names, the tied LM head added, as
  host copies (a state dict, or a safetensors file in /dev/shm) or by reference (an engine in this process);
- `broadcast.py`: the broadcast group (NCCL, or gloo on CPUs) the trainer sends through, and its worker side;
- `worker.py`: the code vLLM runs in its worker to load what arrives (file, tensors, broadcast);
- `verify.py`: the probe that checks, after a sync, that the generator scores like the trainer.
"""
