"""Turning trainer parameters into a weights file: tied heads, wrappers, aliasing."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from gigpo.rollout.weight_sync.tensors import full_state_dict, write_weights_file


def test_tied_head_is_added_and_file_round_trips(tmp_path):
    embed = torch.randn(8, 4)
    named = [("module.model.embed_tokens.weight", embed), ("module.model.norm.weight", torch.ones(4))]
    state = full_state_dict(named, tied_lm_head=True, dtype=torch.bfloat16)
    assert set(state) == {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    path = write_weights_file(state, tmp_path)  # would fail if the head aliased the embedding
    loaded = load_file(str(path))
    assert loaded["lm_head.weight"].dtype == torch.bfloat16
    torch.testing.assert_close(loaded["lm_head.weight"], embed.to(torch.bfloat16))
    embed.add_(1.0)  # the trainer keeps training: the saved copy must not move
    torch.testing.assert_close(state["model.embed_tokens.weight"], (embed - 1.0).to(torch.bfloat16))


def test_host_copies_go_to_the_file_as_they_are_and_views_of_one_buffer_are_copied(tmp_path):
    """The actor's `named_weights` yields host copies of their own: the state dict takes them without a second
    copy. A bf16 engine's parameters are views into one flat buffer, which safetensors refuses to write as
    they are: those are copied."""
    own = [("model.norm.weight", torch.randn(4)), ("model.layers.0.mlp.up_proj.weight", torch.randn(6, 4))]
    state = full_state_dict(own, tied_lm_head=False, dtype=torch.float32)
    for name, tensor in own:
        assert state[name].data_ptr() == tensor.data_ptr(), f"{name} was copied again"
    flat = torch.randn(4 + 24)
    views = [("model.norm.weight", flat[:4]), ("model.layers.0.mlp.up_proj.weight", flat[4:].view(6, 4))]
    state = full_state_dict(views, tied_lm_head=False, dtype=torch.float32)
    assert all(not flat.untyped_storage().data_ptr() <= t.data_ptr() < flat.data_ptr() + flat.nbytes
               for t in state.values())
    loaded = load_file(str(write_weights_file(state, tmp_path)))
    for name, view in views:
        assert torch.equal(loaded[name], view)


def test_untied_model_missing_its_head_is_an_error():
    with pytest.raises(ValueError, match="no lm_head.weight, and this model does not tie them"):
        full_state_dict([("model.embed_tokens.weight", torch.zeros(2, 2))], tied_lm_head=False)
    with pytest.raises(ValueError, match="got no tensors"):
        full_state_dict([], tied_lm_head=True)


def test_broadcast_list_adds_the_tied_head_and_casts_only_when_sent():
    from gigpo.rollout.weight_sync.broadcast import tensor_meta, to_send

    embed = torch.randn(5, 3)
    tensors = to_send([("module.model.embed_tokens.weight", embed), ("model.norm.weight", torch.ones(3))],
                      tied_lm_head=True, dtype=torch.bfloat16)
    assert tensor_meta(tensors) == [("model.embed_tokens.weight", "bfloat16", [5, 3]),
                                    ("model.norm.weight", "bfloat16", [3]), ("lm_head.weight", "bfloat16", [5, 3])]
    head = tensors[2][1].detach()
    assert head.dtype == torch.bfloat16 and torch.equal(head, embed.to(torch.bfloat16))
    with pytest.raises(ValueError, match="no lm_head.weight, and this model does not tie them"):
        to_send([("model.embed_tokens.weight", embed)], tied_lm_head=False, dtype=None)
