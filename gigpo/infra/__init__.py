"""Infrastructure that every package may use and that uses no other gigpo package: dtypes (dtypes.py), bf16 matmuls on
CPUs without native bf16 (cpu_bf16.py), free ports (ports.py), each process's share of the cores (cores.py), every
seed (seeds.py), SIGTERM and Ctrl-C (stopping.py), progress bars (progress.py)."""
