"""`gigpo plan` and the check `gigpo train` makes with it: shapes without weights, per-rank figures, refusals."""
from __future__ import annotations

import json

import pytest
import torch

from gigpo.cli import main
from gigpo.config import load_config
from gigpo.plan import GIB, KNOWN_SHAPES, PlanError, check_fits, model_shape, plan_for, shape_from_config


def _meta_param_count(shape, model_type: str) -> int:
    """Parameters of the transformers model of this shape, built on the meta device (no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                                  num_hidden_layers=shape.num_hidden_layers,
                                  num_attention_heads=shape.num_attention_heads,
                                  num_key_value_heads=shape.num_key_value_heads,
                                  intermediate_size=shape.intermediate_size,
                                  tie_word_embeddings=shape.tie_word_embeddings)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "smollm2-135m-instruct"])
def test_known_shapes_count_what_transformers_builds(name):
    shape = KNOWN_SHAPES[name]
    assert shape.params == _meta_param_count(shape, "qwen2" if shape.qkv_bias else "llama")


def test_shape_is_read_from_config_json_without_weights(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    shape = shape_from_config(json.loads((tiny_model_dir / "config.json").read_text()))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert shape.params == sum(p.numel() for p in model.parameters())
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"))
    assert shape.lora_params(8) == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)


def test_unknown_hub_model_is_a_clear_error():
    config = load_config("recipes/alfworld_7b.yaml", ["model.path=someone/NotOnDisk-9B"])
    with pytest.raises(PlanError, match="someone/NotOnDisk-9B.*no config.json on disk.*download it first"):
        model_shape(config.model)
    assert main(["plan", "recipes/alfworld_7b.yaml", "model.path=someone/NotOnDisk-9B"]) == 2


def test_plan_prints_per_rank_memory_and_host_needs(capsys):
    assert main(["plan", "recipes/alfworld_7b.yaml", "--gpu-gib", "80"]) == 0
    out = capsys.readouterr().out
    for part in ("weights", "gradients", "optimizer", "reference", "activations", "vLLM KV cache", "generation",
                 "update", "vLLM asleep", "= phase total", "peak per rank:", "host RAM:", "each rank", "env workers:"):
        assert part in out, part
    # ZeRO-3 over 8 ranks: each holds an eighth of the 7.6B bf16 weights and of the 12 B/param optimizer
    plan = plan_for(load_config("recipes/alfworld_7b.yaml"), on_gpu=True, gpu_gib=80)
    params = KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"].params
    assert plan.trainer["weights"] == params * 2 / 8
    assert plan.trainer["optimizer"] == params * 12 / 8
    assert f"{plan.trainer['weights'] / GIB:8.2f} GiB" in out
    # vLLM gets gpu_memory_utilization of the GPU: weights + overhead + KV cache add up to the share
    assert sum(plan.generator.values()) == pytest.approx(0.5 * 80 * GIB)
    stage2 = plan_for(load_config("recipes/alfworld_7b.yaml", ["trainer.zero_stage=2"]), on_gpu=True, gpu_gib=80)
    assert stage2.trainer["weights"] == params * 2 and stage2.trainer["optimizer"] == plan.trainer["optimizer"]


@pytest.fixture(autouse=True)
def plan_check_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py turns the check off for the suite's launches; here it is the subject."""
    monkeypatch.delenv("GIGPO_PLAN_CHECK", raising=False)


def test_train_refuses_a_launch_that_cannot_fit_before_loading(monkeypatch, capsys):
    """7B on this CPU machine: refused with the number and a setting, and no model is ever loaded."""
    import gigpo.trainer.loop as loop

    def must_not_run(*args, **kwargs):
        raise AssertionError("the launch went on past the plan check")

    monkeypatch.setattr(loop, "launch_or_train", must_not_run)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["train", "recipes/alfworld_7b.yaml"]) == 2
    err = capsys.readouterr().err
    assert "needs about" in err and "GiB of host RAM" in err and "cannot fit" in err
    assert any(key in err for key in ("trainer.nprocs", "trainer.zero_stage", "model.lora.enabled"))


def test_gpu_launch_names_the_setting_that_frees_most(monkeypatch):
    """No GPU here: the free memory of one is given (the check's only input from the device)."""
    import gigpo.plan as plan_mod

    monkeypatch.setattr(plan_mod, "_cuda_visible", lambda: True)
    monkeypatch.setattr(plan_mod, "device_gib", lambda: 80.0)
    monkeypatch.setattr(plan_mod, "available_gib", lambda on_gpu: 50.0)
    config = load_config("recipes/alfworld_7b.yaml")
    with pytest.raises(PlanError, match=r"needs about 6\d\.\d GiB of GPU memory per rank \(its generation phase\).*50\.0 GiB is free.*"
                                        r"rollout\.gpu_memory_utilization \(now 0\.5; e\.g\. 0\.25\)"):
        check_fits(config)
    monkeypatch.setattr(plan_mod, "available_gib", lambda on_gpu: 79.0)
    assert check_fits(config) is not None
    monkeypatch.setenv("GIGPO_PLAN_CHECK", "0")
    monkeypatch.setattr(plan_mod, "available_gib", lambda on_gpu: 1.0)
    assert check_fits(config) is None


def test_a_tiny_cpu_recipe_fits():
    assert check_fits(load_config("recipes/sokoban_tiny.yaml")) is not None


def test_colocated_peak_is_the_larger_phase_not_the_sum(capsys):
    """alfworld_7b on 8 x 80 GiB: each rank holds its DeepSpeed shard and its own vLLM engine, which sleeps
    during the update; the peak is the generation phase, under the card with a margin."""
    config = load_config("recipes/alfworld_7b.yaml")
    plan = plan_for(config, on_gpu=True, gpu_gib=80)
    generation, update = (sum(plan.phases[p].values()) / GIB for p in ("generation", "update"))
    assert plan.peak_phase() == ("generation", pytest.approx(generation * GIB))
    assert "vLLM KV cache" not in plan.phases["update"] and "activations" not in plan.phases["generation"]
    assert plan.phases["update"]["vLLM asleep"] < plan.generator["vLLM weights"]
    assert generation < 0.85 * 80 and update < generation
    summed = sum(plan.trainer.values()) + sum(plan.generator.values())
    assert summed / GIB > 70  # the old plan's sum of both, which left ~5 GiB on rank 0
    assert main(["plan", "recipes/alfworld_7b.yaml", "--gpu-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert f"peak per rank: {generation:.2f} GiB in generation" in out and "to spare" in out
    # no sleep: the engine stays whole in the update phase too
    awake = plan_for(load_config("recipes/alfworld_7b.yaml", ["rollout.sleep_level=0"]), on_gpu=True, gpu_gib=80)
    assert awake.phases["update"]["vLLM KV cache"] == plan.generator["vLLM KV cache"]
    assert awake.peak_phase()[0] == "update" and awake.peak_phase()[1] > plan.peak_phase()[1]
    # reference offload takes it out of the generation phase only
    offload = plan_for(load_config("recipes/alfworld_7b.yaml", ["trainer.zero_stage=2", "trainer.offload_reference=true"]),
                       on_gpu=True, gpu_gib=80)
    assert "reference" not in offload.phases["generation"] and "reference" in offload.phases["update"]


def test_tensor_parallel_engines_hold_a_shard_of_the_weights():
    one = plan_for(load_config("recipes/alfworld_7b.yaml"), on_gpu=True, gpu_gib=80)
    tp2 = plan_for(load_config("recipes/alfworld_7b.yaml", ["rollout.tensor_parallel_size=2"]), on_gpu=True, gpu_gib=80)
    assert tp2.generator["vLLM weights"] == pytest.approx(one.generator["vLLM weights"] / 2)
    assert sum(tp2.generator.values()) == pytest.approx(sum(one.generator.values()))  # the same share of each GPU
    assert tp2.generator["vLLM KV cache"] > one.generator["vLLM KV cache"]


def test_update_phase_is_within_10_percent_above_the_measured_gpu_peaks():
    """docs/gpu.md: base05b, bf16, checkpointing, budget 8192, one rank on an H200, generator off the GPU:
    PyTorch's allocator peak of the update was 12.1 GiB (ZeRO 0) and 13.0 GiB (ZeRO 3)."""
    for zero, measured in ((0, 12.1), (3, 13.0)):
        config = load_config("recipes/sokoban_tiny.yaml", ["model.init=base05b", "model.dtype=bf16",
                                                            "model.gradient_checkpointing=true", f"trainer.zero_stage={zero}",
                                                            "trainer.micro_token_budget=8192", "trainer.layout=padded",
                                                            "rollout.backend=hf"])
        update = plan_for(config, on_gpu=True, gpu_gib=141).phases["update"]
        trainer_only = sum(v for k, v in update.items() if k != "CUDA context" and not k.startswith("generator")) / GIB
        assert measured <= trainer_only <= 1.10 * measured, (zero, trainer_only, measured)
