"""How far a variant's answer is from the truth: plain attention in fp64 (and, for scale, the same plain computation
in the inputs' dtype), for the output and, in a training pass, for dq, dk and dv. Computed in slices so the scores in
flight stay near REFERENCE_CHUNK_BYTES whatever S is; at long S the output is checked on a seeded sample of query
rows, the gradients on every row (dk and dv need them all).
"""
from __future__ import annotations

import copy
from typing import Callable

import torch

from .budget import REFERENCE_CHUNK_BYTES, accuracy_rows
from .results import Accuracy
from .scores import backward, pipeline
from .workload import Inputs


def checked_rows(queries: int, keys: int) -> torch.Tensor | None:
    """The query rows the output's check compares (`accuracy_rows` of them): every row (None) while a row-block of
    fp64 scores fits REFERENCE_CHUNK_BYTES, else a seeded sample that always includes the first and last rows (the
    one that sees the fewest keys, the one that sees them all)."""
    rows = accuracy_rows(queries, keys)
    if rows >= queries:
        return None
    generator = torch.Generator().manual_seed(0)
    sample = torch.randperm(queries - 2, generator=generator)[:rows - 2] + 1
    return torch.cat([torch.tensor([0, queries - 1]), sample]).sort().values


def _flat(x: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q as [B*H, Lq, D]; k and v as [B*H, S, D], each query head beside its kv head (views, no copies)."""
    w = x.workload
    q = x.q.reshape(-1, *x.q.shape[-2:])
    kv_shape = (q.shape[0], w.seq_len, w.head_dim)
    if w.groups == 1:
        return q, x.k.reshape(kv_shape), x.v.reshape(kv_shape)
    k, v = (t.unsqueeze(2).expand(w.batch, w.kv_heads, w.groups, w.seq_len, w.head_dim).reshape(kv_shape)
            for t in (x.k, x.v))
    return q, k, v


def _never_stop() -> None:
    pass


def attention(x: Inputs, dtype: torch.dtype, rows: torch.Tensor | None,
              check: Callable[[], None] = _never_stop) -> torch.Tensor:
    """Plain attention in `dtype` for the query `rows` (all when None), over slices of the flattened heads, `check`
    called before each (a measurement's guard: it raises to stop). Returns [B*H, rows, D]."""
    q, k, v = _flat(x)
    if rows is not None:
        rows = rows.to(q.device)
        q = q[:, rows]                                                # [B*H, R, D]
    per_slice = q.shape[1] * k.shape[1] * torch.finfo(dtype).bits // 8
    step = max(1, REFERENCE_CHUNK_BYTES // per_slice)
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    for i in range(0, q.shape[0], step):
        check()
        qs, ks, vs = (t[i:i + step].to(dtype) for t in (q, k, v))
        scores = pipeline(qs, ks, x, rows=rows)                             # [chunk, R, S]
        out[i:i + step] = torch.softmax(scores, dim=-1) @ vs
    return out


def gradients(x: Inputs, dtype: torch.dtype, check: Callable[[], None] = _never_stop) -> dict[str, torch.Tensor]:
    """dq, dk, dv of plain attention in `dtype` for the gradient `x.grad_out`, by the textbook backward over row
    blocks of each head: P = softmax(f(q·kᵀ·s) + mask) (f: the score transforms the workload sets, `scores`),
    dV += Pᵀ·dO, dS = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O)) ⊙ f′(q·kᵀ·s), dQ = dS·k·s, dK += dSᵀ·q·s.
    Grouped-query attention sums dk and dv over the query heads that share them.
    Shapes as q, k and v's."""
    w = x.workload
    q, k, v = (t.to(dtype) for t in _flat(x))
    d_out = x.grad_out.reshape(q.shape).to(dtype)
    s = w.seq_len
    rows = max(1, REFERENCE_CHUNK_BYTES // (4 * s * torch.finfo(dtype).bits // 8))
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for h in range(q.shape[0]):
        check()
        for r0 in range(0, w.queries, rows):
            r = torch.arange(r0, min(w.queries, r0 + rows), device=q.device)
            p = torch.softmax(pipeline(q[h, r], k[h], x, rows=r), dim=-1)          # [R, S]
            o, do = p @ v[h], d_out[h, r]
            dv[h] += p.T @ do
            ds = backward(p * (do @ v[h].T - (do * o).sum(-1, keepdim=True)), q[h, r], k[h], x)
            dq[h, r] = ds @ k[h] * x.scale
            dk[h] += ds.T @ q[h, r] * x.scale
    shaped = {"dq": dq.reshape(x.q.shape)}
    for name, grad in (("dk", dk), ("dv", dv)):
        if w.groups > 1:
            grad = grad.reshape(w.batch, w.kv_heads, w.groups, s, w.head_dim).sum(2)
        shaped[name] = grad.reshape(x.k.shape)
    return shaped


def documents(x: Inputs) -> list[Inputs]:
    """Each packed document on its own, as a one-sequence workload of its length ([1, H, L, D] views of the packed
    tensors): the reference of packed documents is plain attention within each, computed apart."""
    w, p = x.workload, x.packed()
    alone = []
    for first, last in zip(p.offsets[:-1].tolist(), p.offsets[1:].tolist()):
        one = w.replace(lengths=None, batch=1, seq_len=last - first)  # every other field carried (a score transform)
        q, k, v = (t.detach()[first:last].transpose(0, 1).unsqueeze(0) for t in (p.q, p.k, p.v))
        grad_out = None if p.grad_out is None else p.grad_out[first:last].transpose(0, 1).unsqueeze(0)
        alone.append(Inputs(one, q, k, v, one.allowed(), None, grad_out))
    return alone


def _packed_attention(x: Inputs, dtype: torch.dtype, check: Callable[[], None]) -> torch.Tensor:
    """Plain attention in `dtype` document by document: [T, H, D]."""
    return torch.cat([attention(d, dtype, None, check).transpose(0, 1) for d in documents(x)])


def _packed_gradients(x: Inputs, dtype: torch.dtype, check: Callable[[], None]) -> dict[str, torch.Tensor]:
    """dq, dk, dv of plain attention in `dtype` document by document: [T, H, D] and [T, Hkv, D]."""
    parts = [gradients(d, dtype, check) for d in documents(x)]
    return {name: torch.cat([g[name][0].transpose(0, 1) for g in parts]) for name in ("dq", "dk", "dv")}


class Reference:
    """The workload's fp64 answers and the plain computation's error in the inputs' dtype, made once and shared by
    every variant measured on it. Packed documents are answered document by document, in their packed layout
    ([T, H, D]: every real row, no padding), and each variant's output is read into that layout first.
    Quantised (fp8) inputs: the truth is fp64 on the inputs as drawn, before quantisation; plain attention beside it
    runs in the drawn dtype (bf16) on them; and the part of any fp8 answer's error that the quantisation alone
    explains is fp64 on the dequantised inputs against that truth (`quantisation_error`)."""

    def __init__(self, x: Inputs, check: Callable[[], None] = _never_stop):
        self.x = x
        w = x.workload
        packed = w.lengths is not None
        self.rows = None if packed else checked_rows(w.queries, w.seq_len)
        exact = x.exact()
        drawn = exact.q.dtype
        self.out = self._outputs(exact, torch.float64, check)
        self.naive_error = (self._outputs(exact, drawn, check).double() - self.out).abs().max().item()
        self.quantisation_error = None
        if x.quantised is not None:
            self.quantisation_error = self._quantisation_error(x, check)
        self.grads = self.naive_grads = None
        if w.training:
            grads = (lambda dtype: _packed_gradients(exact, dtype, check)) if packed else \
                (lambda dtype: gradients(exact, dtype, check))
            self.grads = grads(torch.float64)
            self.naive_grads = {name: (g.double() - self.grads[name]).abs().max().item()
                                for name, g in grads(drawn).items()}

    def _outputs(self, inputs: Inputs, dtype: torch.dtype, check: Callable[[], None]) -> torch.Tensor:
        if inputs.workload.lengths is not None:
            return _packed_attention(inputs, dtype, check)
        return attention(inputs, dtype, self.rows, check)

    def _quantisation_error(self, x: Inputs, check: Callable[[], None]) -> float:
        """fp64 on `x`'s dequantised inputs against the truth: the part of an fp8 answer's error the quantisation
        alone explains."""
        return (self._outputs(x.dequantised(), torch.float64, check) - self.out).abs().max().item()

    def quantised(self, x: Inputs, check: Callable[[], None] = _never_stop) -> "Reference":
        """This reference for `x`, these inputs' drawn values quantised (`Inputs.quantised_as`: a variant's fp8 twin
        beside it): the same fp64 truth and plain attention (the drawn values are the same), made once for both,
        and the quantisation's own part, computed for `x`."""
        assert self.x.quantised is None and x.quantised is not None
        twin = copy.copy(self)
        twin.x, twin.quantisation_error = x, self._quantisation_error(x, check)
        return twin

    def of(self, out: torch.Tensor, grads: dict[str, torch.Tensor] | None = None,
           packing: str = "padded") -> Accuracy:
        """The accuracy of a variant's output (and gradients, in a training pass), laid out as `packing` says."""
        ref = self.out
        out = self.x.as_reference(out, packing)
        if self.x.workload.lengths is None:
            out = out.reshape(-1, *out.shape[-2:])
        diff = (out if self.rows is None else out[:, self.rows.to(out.device)]).double() - ref
        errors = None
        if grads is not None and self.grads is not None:
            leaves = "packed" if packing == "block" else packing  # one packed sequence is a view of packed leaves
            errors = {name: (self.x.as_reference(grads[name], leaves).double() - self.grads[name]).abs().max().item()
                      for name in self.grads}
        return Accuracy(max_abs_error=diff.abs().max().item(), relative_error=(diff.norm() / ref.norm()).item(),
                        naive_max_abs_error=self.naive_error, quantisation_max_abs_error=self.quantisation_error,
                        rows_checked=None if self.rows is None else len(self.rows),
                        grads=errors, naive_grads=self.naive_grads)
