"""A tiny transformer-like model for the tests of ``kcert model`` (tests/test_model*.py): an embedding, RMS
norms, a two-head attention block and a gated MLP in two residual blocks, bf16, random weights."""

import copy

import torch
from torch import nn

VOCAB, WIDTH, SEQ = 64, 32, 16


class Norm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class EpsOutside(Norm):
    """The defect: eps added outside the square root."""

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)).to(x.dtype)


class FusedGain(Norm):
    """Benign: the gain applied in float32 before the one rounding (the same function, rounded once
    instead of twice)."""

    def forward(self, x):
        xf = x.float()
        return (self.weight.float() * xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def scores(self, q, k):
        return (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        w = self.scores(q, k).softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, s, d))




class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gate = nn.Linear(d, 2 * d, bias=False)
        self.up = nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.down(self.act(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = Norm(d), Attention(d), Norm(d), MLP(d)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Tiny(nn.Module):
    def __init__(self, vocab=VOCAB, d=WIDTH, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(layers))
        self.norm = Norm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def tiny(seed=0):
    torch.manual_seed(seed)
    return Tiny().to(torch.bfloat16).eval()


def swapped(model, path, cls):
    """A copy of ``model`` whose module at ``path`` has class ``cls`` (same parameters)."""
    prod = copy.deepcopy(model)
    prod.get_submodule(path).__class__ = cls
    return prod


def write_defect_pair_file(path, names):
    """A ``kcert model`` file at ``path`` defining the pair "defect": :func:`tiny` against a copy whose
    ``layers.1.norm2`` adds eps outside the square root, with the modules selected by ``names`` (fnmatch)."""
    from pathlib import Path

    here = str(Path(__file__).resolve().parent)
    Path(path).write_text(
        f"import sys\nsys.path.insert(0, {here!r})\nimport kcert\n"
        "from model_fixtures import EpsOutside, SEQ, VOCAB, swapped, tiny\n\n"
        "ref = tiny()\n"
        "defect = kcert.ModelPair('defect', ref, swapped(ref, 'layers.1.norm2', EpsOutside),\n"
        "                         {'input_ids': kcert.Integers((2, SEQ), 0, VOCAB)},\n"
        f"                         modules=kcert.Modules(names={tuple(names)!r}))\n")
    return Path(path)
