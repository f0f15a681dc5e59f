"""MoE routing: top-k experts per token from sigmoid gating, the reference and its inputs.

    topk_sigmoid(logits [tokens, experts] fp32/fp16/bf16, bias [experts] fp32 or None, k) -> (weights, ids)

Selection: the k experts with the largest score, largest first, ties broken by the lower expert index. The
score is the logit itself without a bias (the sigmoid is monotonic), and sigmoid(logit) + bias with one
(DeepSeek-V3 routing: the bias steers selection only). Weights (fp32) are sigmoid(logit) of the selected
experts, renormalised to sum to 1 per token with a bias. Ids are int32. Computed in fp32.
"""

import torch


def _inputs(case: dict, seed: int, device: str, with_bias: bool):
    # made on the device itself: a [65536, 256] draw on the host would take longer than the kernels' timing
    g = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(case["tokens"], case["experts"], generator=g, device=device) * 2.0
    bias = (torch.randn(case["experts"], generator=g, device=device) * 0.1) if with_bias else None
    return (logits.to(getattr(torch, case["dtype"])), bias, int(case["k"]))


def make_inputs(case: dict, seed: int, device: str):
    return _inputs(case, seed, device, with_bias=False)


def make_inputs_biased(case: dict, seed: int, device: str):
    return _inputs(case, seed, device, with_bias=True)


def selection_scores(logits: torch.Tensor, bias):
    x = logits.float()
    return x if bias is None else torch.sigmoid(x) + bias.float()


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    sel = selection_scores(logits, bias)
    ids = torch.sort(sel, dim=-1, descending=True, stable=True).indices[:, :k]   # stable: lower index first
    w = torch.sigmoid(logits.float()).gather(-1, ids)
    if bias is not None:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def check(inputs, output, expected):
    """Ids equal the reference's. Without a bias the scores are the logits themselves, so the ids must be
    exact (ties by the lower index). With a bias the scores come from arithmetic (a sigmoid) that a kernel
    may round differently: two experts whose scores are within 1e-6 may come in either order. Weights match
    the reference's within 1e-5 for the ids the candidate chose. Returns (ok, message)."""
    logits, bias, k = inputs
    if not (isinstance(output, (tuple, list)) and len(output) == 2):
        return False, f"expected (weights, ids), got {type(output).__name__}"
    w, ids = output
    ew, eids = expected
    for name, got, want in (("weights", w, ew), ("ids", ids, eids)):
        if not isinstance(got, torch.Tensor):
            return False, f"{name} is a {type(got).__name__}, not a tensor"
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            return False, f"{name}: {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
    ids, eids = ids.long().to(eids.device), eids.long()
    experts = logits.shape[-1]
    if ((ids < 0) | (ids >= experts)).any():
        return False, f"ids outside 0..{experts - 1}"
    if (ids.sort(dim=-1).values.diff(dim=-1) == 0).any():
        return False, "an expert is selected twice for one token"
    sel = selection_scores(logits, bias)
    got_s, want_s = sel.gather(-1, ids), sel.gather(-1, eids)
    differ = ids != eids
    if bias is None:
        near = torch.zeros_like(differ)
    else:
        near = (got_s - want_s).abs() <= 1e-6 * want_s.abs().clamp_min(1.0)
    bad = differ & ~near
    if bad.any():
        t, j = (int(v) for v in bad.nonzero()[0])
        return False, (f"{int(bad.sum())} of {ids.numel()} ids wrong; token {t}, rank {j}: expert {int(ids[t, j])} "
                       f"(score {float(got_s[t, j]):.6g}), expected {int(eids[t, j])} (score {float(want_s[t, j]):.6g})")
    want_w = torch.sigmoid(logits.float()).gather(-1, ids)
    if bias is not None:
        want_w = want_w / want_w.sum(dim=-1, keepdim=True)
    w = w.to(want_w.device)
    if torch.isnan(w).any():
        return False, "NaN in the weights"
    err = (w - want_w).abs()
    tol = 1e-5 + 1e-5 * want_w.abs()
    if (err > tol).any():
        t, j = (int(v) for v in (err > tol).nonzero()[0])
        return False, (f"{int((err > tol).sum())} weights off; token {t}, rank {j}: {float(w[t, j]):.7g}, "
                       f"expected {float(want_w[t, j]):.7g}")
    ties = int((differ & near).sum())
    return True, f"ok ({ties} near-tie swaps accepted)" if ties else "ok"
