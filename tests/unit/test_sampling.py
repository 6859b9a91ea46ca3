"""The HF engine's sampler (engine/sampling.py): one uniform per row through the row's cumulative mass."""

import torch

from thinking_seeds.engine.sampling import sample_rows, top_p_filter


def test_samples_follow_each_rows_distribution():
    """200k draws of three rows (one unnormalised): each token's frequency is its probability to 0.005."""
    probs = torch.tensor([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25], [2.0, 0.0, 0.0, 6.0]])
    n = 200_000
    g = torch.Generator().manual_seed(0)
    toks = sample_rows(probs.repeat(n, 1), torch.rand(3 * n, generator=g)).view(n, 3)
    for r in range(3):
        freq = torch.bincount(toks[:, r], minlength=4).double() / n
        assert torch.allclose(freq, probs[r].double() / probs[r].sum(), atol=0.005), (r, freq)


def test_zero_mass_is_never_drawn_even_at_the_ends_of_the_unit_interval():
    """u = 0 and u just under 1 land on tokens with mass, never on the zeros before, between or after."""
    probs = torch.tensor([[0.0, 0.0, 0.5, 0.0, 0.5, 0.0]] * 4)
    u = torch.tensor([0.0, 0.5, 1.0 - 2**-24, 0.25])
    assert sample_rows(probs, u).tolist() == [4, 2, 2, 4]  # x = (1 - u) * mass: 1, 0.5, 2^-24, 0.75
    # what top-p leaves: the greedy token alone at a tiny top_p
    p = torch.softmax(torch.randn(5, 49_152, generator=torch.Generator().manual_seed(1)), -1)
    kept = top_p_filter(p, 1e-6)
    assert sample_rows(kept, torch.rand(5)).tolist() == p.argmax(-1).tolist()


def test_a_152k_vocabulary_keeps_the_mass_of_its_tail():
    """The sums are float64: 100k tail entries of 1e-9 each after a head of ~1 still have their own
    slice of the unit interval (in float32 their increments round away next to 1.0 and they collapse)."""
    V = 151_936
    probs = torch.zeros(1, V)
    probs[0, 0] = 1.0 - 1e-4
    probs[0, V - 100_000 :] = 1e-9
    # float64 uniforms 1.5e-9 apart in the last 1e-4 of the mass (the engine draws them so: float32's
    # resolution, 2^-24 = 6e-8, could not reach a 1e-9 token on its own)
    u = torch.arange(1000, dtype=torch.float64) * 1.5e-9
    toks = sample_rows(probs.expand(len(u), V), u)
    assert bool((toks >= V - 100_000).all())
    assert len(set(toks.tolist())) >= 990  # each uniform its own tail token (float32 sums: ~25 tokens)
    assert toks.tolist() == sorted(toks.tolist(), reverse=True)  # larger u, earlier token
