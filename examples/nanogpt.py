"""karpathy/nanoGPT's ``train.py`` on flowpipe: the same GPT, AdamW groups, warm-up and cosine decay, gradient
accumulation, clipping, periodic loss estimates and best checkpoint, on one process or under torchrun.

    python examples/nanogpt_prepare.py --out data/pychars           # a character corpus from Python's sources
    python examples/nanogpt.py --data data/pychars --out_dir out --seed 1337 --max_iters=2000
    torchrun --standalone --nproc_per_node=2 examples/nanogpt.py --data data/pychars --out_dir out

``--data`` holds ``train.bin``, ``val.bin`` and ``meta.pkl`` as nanoGPT's ``prepare.py`` writes them; nanoGPT's
config names are ``--name=value``. The global batch is ``batch_size * gradient_accumulation_steps`` windows on any
number of processes (micro-batches of ``batch_size``), the same tokens and the same step on every layout. The run
resumes exactly from ``out_dir/run`` when started again. The last line is ``val=<last estimate> best=<best
estimate> steps=<optimizer steps> tokens=<tokens trained on> full_val=<mean loss over every non-overlapping
block_size window of val.bin>``.
"""
import ast
import math
import os
import pickle
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, Checkpoint, Pipeline, V, print0
from flowpipe.callbacks import Callback, ModelCheckpoint, Validate
from flowpipe.data import TokenWindows
from flowpipe.models.torch import TorchModel

defaults = dict(data='data/pychars', out_dir='out', seed=1337, device='cpu', n_layer=4, n_head=4, n_embd=128,
                block_size=64, bias=False, dropout=0.0, batch_size=12, gradient_accumulation_steps=1, max_iters=2000,
                lr_decay_iters=2000, eval_interval=250, eval_iters=200, log_interval=10, learning_rate=1e-3,
                min_lr=1e-4, warmup_iters=100, beta1=0.9, beta2=0.99, weight_decay=0.1, grad_clip=1.0)


def parse(argv):
    """nanoGPT's configurator: ``--name=value`` (or ``--name value``) over the defaults, values as Python literals."""
    config, words = dict(defaults), list(argv)
    while words:
        word = words.pop(0)
        key, _, value = word[2:].partition('=') if word.startswith('--') else (word, '', '')
        if key not in config or (not value and not words):
            sys.exit(f"Expected --name=value with a name among {sorted(config)}. Received: {word!r}")
        value = value or words.pop(0)
        config[key] = value if isinstance(defaults[key], str) else type(defaults[key])(ast.literal_eval(value))
    return SimpleNamespace(**config)


class Block(nn.Module):
    """Pre-norm causal self-attention (``scaled_dot_product_attention``) and an MLP, each with a residual."""

    def __init__(self, c):
        super().__init__()
        self.n_head, self.dropout = c.n_head, c.dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(c.n_embd, bias=c.bias), nn.LayerNorm(c.n_embd, bias=c.bias)
        self.c_attn, self.c_proj = nn.Linear(c.n_embd, 3 * c.n_embd, c.bias), nn.Linear(c.n_embd, c.n_embd, c.bias)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd, c.bias), nn.GELU(),
                                 nn.Linear(4 * c.n_embd, c.n_embd, c.bias), nn.Dropout(c.dropout))
        self.resid_dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = (part.view(b, t, self.n_head, e // self.n_head).transpose(1, 2)
                   for part in self.c_attn(self.ln_1(x)).split(e, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0, is_causal=True)
        x = x + self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, e)))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT: token and position embeddings, ``n_layer`` blocks, a head tied to the token embedding."""

    def __init__(self, c):
        super().__init__()
        self.block_size = c.block_size
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.drop, self.h = nn.Dropout(c.dropout), nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f, self.lm_head = nn.LayerNorm(c.n_embd, bias=c.bias), nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():     # GPT-2's initialization, residual projections scaled down
            if p.dim() >= 2:
                residual = name.endswith(('c_proj.weight', 'mlp.2.weight'))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer) if residual else 0.02)
            elif 'ln' not in name:                  # biases from 0 (LayerNorms keep torch's 1 and 0)
                nn.init.zeros_(p)

    def forward(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size:])[:, -1, :] / temperature
            if top_k is not None:
                logits[logits < torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]] = -float('inf')
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
        return idx


class NoCode(pickle.Unpickler):
    """meta.pkl is plain data: reading it imports nothing, so it runs no code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"Expected meta.pkl of plain values. Received: it names {module}.{name}")


class StepLog(Callback):
    """nanoGPT's ``iter N: loss L, time T ms`` every ``log_interval`` steps (rank 0)."""
    order, last = 2, None

    def on_batch_end(self, run, batch, logs):
        if run.step % c.log_interval == 0 and run.is_main and 'train/loss' in logs:
            now = time.perf_counter()
            took = '' if self.last is None else f", time {(now - self.last) * 1000 / c.log_interval:.2f}ms"
            print(f"iter {run.step}: loss {logs['train/loss']:.4f}{took}", flush=True)
            self.last = now


c = parse(sys.argv[1:])
with open(os.path.join(c.data, 'meta.pkl'), 'rb') as file:
    c.vocab_size = NoCode(file).load()['vocab_size']
torch.manual_seed(c.seed)
accumulate = c.gradient_accumulation_steps
config = {'model': lambda: GPT(c), 'inputs/idx/shape': (c.block_size,), 'inputs/targets/classes': c.vocab_size,
          'initial_block/inputs': 'idx', 'loss': 'ce', 'device': c.device, 'clip_grad_norm': c.grad_clip or None,
          'microbatch': c.batch_size if accumulate > 1 else None,
          'optimizer': {'name': 'AdamW', 'lr': c.learning_rate, 'betas': (c.beta1, c.beta2),
                        'weight_decay': c.weight_decay, 'no_decay': 'auto'},
          'decay': {'name': 'warmup_cosine', 'warmup': c.warmup_iters, 'total': c.lr_decay_iters, 'min_lr': c.min_lr}}
train = (Pipeline().init_model('gpt', TorchModel, 'static', config)
         .train_model('gpt', idx=B.inputs, targets=B.targets)) << TokenWindows(os.path.join(c.data, 'train.bin'),
                                                                                 c.block_size)


def evaluation(split, **kwargs):
    return (Pipeline().import_model('gpt', train).init_variable('losses', []).init_variable('sizes', [])
            .predict_model('gpt', idx=B.inputs, targets=B.targets, fetches='loss', save_to=V('losses', mode='a'))
            .update(V('sizes', mode='a'), B.size)) << TokenWindows(os.path.join(c.data, f'{split}.bin'),
                                                                    c.block_size, **kwargs)


def mean_loss(pipeline):
    return float(np.average(pipeline.v('losses'), weights=pipeline.v('sizes')))


estimates = dict(every=c.eval_interval, steps=True, at_start=True, estimate=c.eval_iters, batch_size=c.batch_size,
                 metrics={'loss': mean_loss})
val = Validate(evaluation('val'), **estimates)
best = ModelCheckpoint(os.path.join(c.out_dir, 'best'), monitor='val/loss', save_top_k=1)
callbacks = [val, Validate(evaluation('train'), prefix='train_estimate', **estimates), best, StepLog()]
folder = os.path.join(c.out_dir, 'run')
train.run(c.batch_size * accumulate, n_iters=c.max_iters, seed=c.seed, callbacks=callbacks,
          checkpoint=Checkpoint(folder, every=c.eval_interval, trusted=True), resume=os.path.isdir(folder))
full = Validate(evaluation('val', sequential=True), batch_size=c.batch_size, metrics={'loss': mean_loss}).validate()
steps = train.m('gpt').iteration
print0(f"val={val.values['val/loss']:.4f} best={best.best_score:.4f} steps={steps} "
       f"tokens={steps * c.batch_size * accumulate * c.block_size} full_val={full['val/loss']:.4f}")
