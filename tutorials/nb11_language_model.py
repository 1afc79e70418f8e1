"""Cells of 11_language_model.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 11. A language model: token data, a GPT, the same loss on every layout, generation

This tutorial trains a small character-level GPT the way nanoGPT does, with flowpipe's pieces: a token file read
as random windows (`TokenWindows`), `'loss': 'ce'` on the `(B, T, V)` logits a language model returns, AdamW with
weight decay on matrices only, warm-up and cosine decay, and a run counted in steps whose validation estimates the
loss on a few batches. It then shows that one device, micro-batches, replicas and two processes take the same step
on the same tokens, padding included, and generates text. It runs in about a minute on two CPU cores;
`docs/language_models.md` has every option, `examples/nanogpt.py` the whole script."""),
    ('code', """
import os
import sysconfig
import tempfile

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, V, Dataset, Pipeline
from flowpipe.callbacks import Validate
from flowpipe.data import TokenWindows, open_tokens
from flowpipe.models.torch import TorchModel
from flowpipe.parallel import launch

folder = tempfile.mkdtemp()
generator = torch.manual_seed(0)"""),
    ('md', """
## A token file

The corpus is text every Python installation holds: the first 200,000 ASCII characters of the standard library's
sources. Each character is a token; the ids go to `train.bin` and `val.bin` as `uint16`, the files nanoGPT's
`prepare.py` writes. `open_tokens` maps such a file (`np.memmap`): nothing is read until a window needs it."""),
    ('code', """
text = ''
for name in ('functools.py', 'fractions.py', 'textwrap.py', 'calendar.py', 'dataclasses.py', 'pathlib.py'):
    path = os.path.join(sysconfig.get_paths()['stdlib'], name)
    if os.path.exists(path):
        text += open(path, encoding='utf-8').read().encode('ascii', errors='ignore').decode()
text = text[:200_000]
itos = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(itos)}
ids = np.array([stoi[ch] for ch in text], dtype=np.uint16)
cut = int(len(ids) * 0.9)
ids[:cut].tofile(os.path.join(folder, 'train.bin'))
ids[cut:].tofile(os.path.join(folder, 'val.bin'))
decode = lambda row: ''.join(itos[i] for i in row)
tokens = open_tokens(os.path.join(folder, 'train.bin'))
print(f'{len(text):,} characters, {len(itos)} distinct; train.bin {len(tokens):,} tokens, {type(tokens).__name__}')"""),
    ('md', """
## Random windows, drawn per item

`TokenWindows(path, block_size)` gives batches of `inputs` and `targets`, `(items, block_size)` windows, the targets
shifted by one token. Where a window starts is drawn from the run's seed, the batch's number and the item's place
in the global batch: not from which process, replica or micro-batch trains on it. A rank's shard of a batch holds
the windows those items have in the whole batch, and `gen_batch(..., seed=s)` gives the windows
`run(..., seed=s)` trains on."""),
    ('code', """
block_size, vocab_size = 32, len(itos)
train_windows = TokenWindows(os.path.join(folder, 'train.bin'), block_size)
batch = next(train_windows.gen_batch(4, seed=1))
for x, y in zip(batch.inputs[:2], batch.targets[:2]):
    print(repr(decode(x)), '->', repr(decode(y)))
again = next(train_windows.gen_batch(4, seed=1))
same_windows = bool(np.array_equal(batch.inputs, again.inputs))
print('the same seed draws the same windows:', same_windows)"""),
    ('md', """
## A small GPT

nanoGPT's architecture, small: token and position embeddings, pre-norm blocks of causal self-attention
(`scaled_dot_product_attention`) and an MLP, a head tied to the token embedding, GPT-2's initialization.
`forward` returns the logits of every position, `(B, T, V)`; `generate` samples from them one token at a time."""),
    ('code', """
class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.ln_1, self.ln_2 = heads, nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = (part.view(b, t, self.heads, e // self.heads).transpose(1, 2)
                   for part in self.qkv(self.ln_1(x)).split(e, dim=2))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, e))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, width=64, heads=4, layers=2):
        super().__init__()
        self.block_size = block_size
        self.wte, self.wpe = nn.Embedding(vocab_size, width), nn.Embedding(block_size, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(width), nn.Linear(width, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, parameter in self.named_parameters():      # GPT-2's initialization: small logits at first
            if parameter.dim() >= 2:
                nn.init.normal_(parameter, 0.0, 0.02)
            elif 'ln' not in name:
                nn.init.zeros_(parameter)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size:])[:, -1, :] / temperature
            if top_k is not None:
                logits[logits < torch.topk(logits, top_k).values[:, [-1]]] = -float('inf')
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
        return idx"""),
    ('md', """
## Training, counted in steps

The config is nanoGPT's recipe in flowpipe's keys. `'no_decay': 'auto'` keeps weight decay off the biases and
LayerNorm weights (parameters of fewer than 2 dimensions), as nanoGPT's `configure_optimizers` does;
`'warmup_cosine'` is its `get_lr`. `Validate(..., steps=True, at_start=True, estimate=8)` makes the run count in
steps: every 50 steps, and at step 0, it estimates the validation loss on 8 batches of random windows (nanoGPT's
`estimate_loss`), and the run prints its line. The model is `'static'`: built before the run, so step 0 can be
validated."""),
    ('code', """
config = {'model': lambda: GPT(vocab_size, block_size), 'inputs/idx/shape': (block_size,),
          'inputs/targets/classes': vocab_size, 'initial_block/inputs': 'idx', 'loss': 'ce', 'clip_grad_norm': 1.0,
          'optimizer': {'name': 'AdamW', 'lr': 3e-3, 'betas': (0.9, 0.99), 'weight_decay': 0.1, 'no_decay': 'auto'},
          'decay': {'name': 'warmup_cosine', 'warmup': 20, 'total': 200, 'min_lr': 3e-4}}
train = (Pipeline().init_model('gpt', TorchModel, 'static', config)
         .train_model('gpt', idx=B.inputs, targets=B.targets)) << train_windows
val = (Pipeline().import_model('gpt', train).init_variable('losses', [])
       .predict_model('gpt', idx=B.inputs, targets=B.targets, fetches='loss', save_to=V('losses', mode='a'))
       ) << TokenWindows(os.path.join(folder, 'val.bin'), block_size)
validate = Validate(val, every=50, steps=True, at_start=True, estimate=8, batch_size=16,
                    metrics={'loss': lambda p: float(np.mean(p.v('losses')))})
train.run(16, n_iters=200, seed=0, callbacks=[validate])
gpt = train.m('gpt')
groups = [(len(group['params']), group['weight_decay']) for group in gpt.optimizer.param_groups]
print('parameter groups (count, weight decay):', groups)
val_loss = validate.values['val/loss']"""),
    ('md', """
## The same step on every layout, padding included

A language model's batch often holds positions that do not count: padding, with the target `ignore_index` (-100).
`'loss': 'ce'` is then the mean over the **valid tokens of the whole batch**, whatever the layout: each piece adds
its sum of token losses divided by the number of valid tokens of the whole batch, counted once before the batch is
cut. A loop that averages each micro-batch and divides by the number of micro-batches, as `loss /
gradient_accumulation_steps` does, weighs the tokens of a sparse micro-batch more. Below, a batch of 6 windows in
which item 0 is all padding and the others count 4 to 32 positions: one SGD step on one device, with micro-batches
of 2, on 2 replicas (`'CPU:0x2'`), and both, against the step written by hand, in float64."""),
    ('code', """
padded = next(train_windows.gen_batch(6, seed=3))
padded_targets = padded.targets.copy()
for item, valid in enumerate([0, 4, 32, 9, 17, 25]):
    padded_targets[item, valid:] = -100
data = Dataset(6, preloaded={'inputs': padded.inputs, 'targets': padded_targets})


def one_step(device='cpu', microbatch=None):
    torch.manual_seed(5)
    step_config = {**config, 'model': lambda: GPT(vocab_size, block_size).double(), 'decay': None,
                   'optimizer': {'name': 'SGD', 'lr': 1.0}, 'clip_grad_norm': None, 'device': device,
                   'microbatch': microbatch}
    done = (Pipeline().init_model('gpt', config=step_config)
            .train_model('gpt', idx=B.inputs, targets=B.targets)) << data
    done.run(6, n_iters=1)
    return [p.detach().numpy() for p in done.m('gpt').model.parameters()]


def by_hand(per_microbatch=None):
    torch.manual_seed(5)
    network = GPT(vocab_size, block_size).double()
    inputs, targets = torch.as_tensor(padded.inputs), torch.as_tensor(padded_targets)
    size = per_microbatch or 6
    chunks = [slice(start, start + size) for start in range(0, 6, size)]
    for chunk in chunks:                          # per_microbatch: nanoGPT's loss / gradient_accumulation_steps
        logits = network(inputs[chunk])
        loss = F.cross_entropy(logits.reshape(-1, vocab_size), targets[chunk].reshape(-1), ignore_index=-100)
        (loss / len(chunks)).backward()
    return [(p - p.grad).detach().numpy() for p in network.parameters()]


def difference(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


reference = by_hand()
layouts = {'one device': {}, 'microbatch=2': {'microbatch': 2}, 'CPU:0x2': {'device': 'CPU:0x2'},
           'CPU:0x2, microbatch=2': {'device': 'CPU:0x2', 'microbatch': 2}}
layout_differences = {name: difference(one_step(**layout), reference) for name, layout in layouts.items()}
for name, value in layout_differences.items():
    print(f'{name:<24} {value:.1e}')
accumulated_difference = difference(by_hand(per_microbatch=2), reference)
print(f"{'loss / accumulation':<24} {accumulated_difference:.1e}   (the mean of the micro-batches' means)")"""),
    ('md', """
## Two processes

`launch(function, 2)` runs a function in two processes of one job (gloo on this machine). Each trains on its
shard of the global batch of 6 — rank 0 on items 0 to 2, the all-padding item among them — and the ranks add
their counts of valid tokens before the step. Both end with the weights of the step by hand. (A launched function
takes what it uses from the notebook with dill, see `07_distributed`.)"""),
    ('code', """
ranks = launch(one_step, 2, timeout=300)
rank_differences = [difference(weights, reference) for weights in ranks]
print('2 ranks against the step by hand:', [f'{value:.1e}' for value in rank_differences])"""),
    ('md', """
## Generation

The trained network is `gpt.model`. Its `generate` continues a prompt; seeded, it draws the same text every
time."""),
    ('code', """
prompt = torch.tensor([[stoi[ch] for ch in 'def ']])
samples = []
for _ in range(2):
    torch.manual_seed(42)
    samples.append(decode(gpt.model.eval().generate(prompt, 120, temperature=0.8, top_k=10)[0].tolist()))
print(samples[0])
same_generation = samples[0] == samples[1]
print('validation loss', round(val_loss, 3), '- the same text from the same seed:', same_generation)"""),
]
