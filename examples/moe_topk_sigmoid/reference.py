"""MoE routing: the top-k experts per token, the references of the case study's four problems and their inputs.

    topk_sigmoid(logits [tokens, experts] fp32/fp16/bf16, bias [experts] fp32 or None, k) -> (weights, ids)
    topk_softmax(logits, k, renormalize) -> (weights, ids)
    grouped_topk(logits, bias [experts] fp32, k, n_group, topk_group) -> (weights, ids)

Selection: the k experts with the largest score, largest first, ties broken by the lower expert index. The
score is the logit itself without a bias (the sigmoid is monotonic), and sigmoid(logit) + bias with one
(DeepSeek-V3 routing: the bias steers selection only). Weights (fp32) are sigmoid(logit) of the selected
experts, renormalised to sum to 1 per token with a bias. Ids are int32. Computed in fp32.

Softmax gating (Mixtral, Qwen2/3-MoE, DeepSeek-V2): the same selection on the logits; the weights are the
selected experts' probabilities under a softmax over all experts, renormalised over the k when ``renormalize``
(Mixtral and Qwen3-MoE do; DeepSeek-V2 and Qwen1.5-MoE do not).

Grouped selection (DeepSeek-V3/R1): the experts form ``n_group`` groups of consecutive experts; a group's score is
the sum of its two largest biased scores (sigmoid(logit) + bias); the ``topk_group`` groups of largest score
(ties by the lower group) are kept, and the k experts of largest biased score within them are selected; weights
as with a bias (sigmoid of the selected logits, renormalised).
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


def _stable_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of the k largest scores per row, largest first, ties by the lower index."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :k]


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    sel = selection_scores(logits, bias)
    ids = _stable_topk(sel, k)
    w = torch.sigmoid(logits.float()).gather(-1, ids)
    if bias is not None:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def _output_types(output, expected) -> str | None:
    """What is wrong with the form of ``output`` against the reference's (weights, ids): None when nothing."""
    if not (isinstance(output, (tuple, list)) and len(output) == 2):
        return f"expected (weights, ids), got {type(output).__name__}"
    for name, got, want in (("weights", output[0], expected[0]), ("ids", output[1], expected[1])):
        if not isinstance(got, torch.Tensor):
            return f"{name} is a {type(got).__name__}, not a tensor"
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            return f"{name}: {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
    return None


def _weights_off(w: torch.Tensor, want_w: torch.Tensor) -> str | None:
    """Which weights are off from ``want_w`` by more than 1e-5 (absolute plus relative): None when none."""
    w = w.to(want_w.device)
    if torch.isnan(w).any():
        return "NaN in the weights"
    err = (w - want_w).abs()
    bad = err > 1e-5 + 1e-5 * want_w.abs()
    if bad.any():
        t, j = (int(v) for v in bad.nonzero()[0])
        return (f"{int(bad.sum())} weights off; token {t}, rank {j}: {float(w[t, j]):.7g}, "
                f"expected {float(want_w[t, j]):.7g}")
    return None


def check(inputs, output, expected):
    """Ids equal the reference's. Without a bias the scores are the logits themselves, so the ids must be
    exact (ties by the lower index). With a bias the scores come from arithmetic (a sigmoid) that a kernel
    may round differently: two experts whose scores are within 1e-6 may come in either order. Weights match
    the reference's within 1e-5 for the ids the candidate chose. Returns (ok, message)."""
    logits, bias, k = inputs
    wrong = _output_types(output, expected)
    if wrong:
        return False, wrong
    w, ids = output
    eids = expected[1]
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
    wrong = _weights_off(w, want_w)
    if wrong:
        return False, wrong
    ties = int((differ & near).sum())
    return True, f"ok ({ties} near-tie swaps accepted)" if ties else "ok"


# ---------------------------------------------------------------------------------------------- softmax gating

def make_inputs_softmax(case: dict, seed: int, device: str):
    logits, _, k = _inputs(case, seed, device, with_bias=False)
    return (logits, k, bool(case.get("renormalize", False)))


def softmax_weights(logits: torch.Tensor, ids: torch.Tensor, renormalize: bool) -> torch.Tensor:
    w = torch.softmax(logits.float(), dim=-1).gather(-1, ids.long())
    return w / w.sum(dim=-1, keepdim=True) if renormalize else w


def topk_softmax(logits: torch.Tensor, k: int, renormalize: bool):
    ids = _stable_topk(logits.float(), k)
    return softmax_weights(logits, ids, renormalize), ids.to(torch.int32)


def check_softmax(inputs, output, expected):
    """The ids are a top-k of the experts' probabilities in descending order, where probabilities within 1e-6 of
    each other (relative) may come in either order (a kernel's exponentials round differently from PyTorch's;
    equal logits give equal probabilities); the weights match the reference's within 1e-5 for the ids chosen."""
    logits, k, renormalize = inputs
    probs = torch.softmax(logits.float(), dim=-1)
    return _check_selection(output, expected, probs, None, lambda ids: softmax_weights(logits, ids, renormalize))


# ------------------------------------------------------------------------------------------ grouped selection

def make_inputs_grouped(case: dict, seed: int, device: str):
    logits, bias, k = _inputs(case, seed, device, with_bias=True)
    return (logits, bias, k, int(case["n_group"]), int(case["topk_group"]))


def group_scores(scores: torch.Tensor, n_group: int) -> torch.Tensor:
    """Each group's score: the sum of its two largest scores (one, for groups of one expert)."""
    tokens, experts = scores.shape
    grouped = scores.view(tokens, n_group, experts // n_group)
    return grouped.topk(min(2, experts // n_group), dim=-1).values.sum(dim=-1)


def grouped_topk(logits: torch.Tensor, bias: torch.Tensor, k: int, n_group: int, topk_group: int):
    tokens, experts = logits.shape
    sel = selection_scores(logits, bias)
    groups = _stable_topk(group_scores(sel, n_group), topk_group)
    kept = torch.zeros(tokens, n_group, dtype=torch.bool, device=logits.device).scatter(1, groups, True)
    sel = sel.masked_fill(~kept.repeat_interleave(experts // n_group, dim=1), -float("inf"))
    ids = _stable_topk(sel, k)
    w = torch.sigmoid(logits.float()).gather(-1, ids)
    return w / w.sum(dim=-1, keepdim=True), ids.to(torch.int32)


def check_grouped(inputs, output, expected):
    """The ids are the top-k, in descending order, of the biased scores within some choice of the topk_group
    groups of largest group score, where scores (and group scores) within 1e-6 of each other (relative) may be
    ordered either way; the weights match the reference's within 1e-5 for the ids chosen."""
    logits, bias, k, n_group, topk_group = inputs

    def weights(ids):
        w = torch.sigmoid(logits.float()).gather(-1, ids)
        return w / w.sum(dim=-1, keepdim=True)

    return _check_selection(output, expected, selection_scores(logits, bias), (n_group, topk_group), weights)


def _near(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a is at most b plus the rounding tolerance (1e-6 relative, absolute below 1)."""
    return a <= b + 1e-6 * torch.maximum(a.abs(), b.abs()).clamp_min(1.0)


def _check_selection(output, expected, sel, groups, weights):
    """Whether ``output`` (weights, ids) is a valid top-k of the scores ``sel`` [tokens, experts], within groups
    when ``groups`` = (n_group, topk_group) is given; ``weights(ids)`` the weights the chosen ids must have.
    Validity rather than equality with the reference, so that near ties may go either way: every unchosen
    expert that could have been chosen scores at most the weakest chosen one (within the tolerance), and with
    groups, the chosen experts' groups can be completed to a top topk_group set of groups none of whose other
    experts beats the weakest chosen."""
    wrong = _output_types(output, expected)
    if wrong:
        return False, wrong
    w, ids = output
    eids = expected[1]
    tokens, experts = sel.shape
    ids = ids.long().to(sel.device)
    if tokens == 0:
        return True, "ok"
    if ((ids < 0) | (ids >= experts)).any():
        return False, f"ids outside 0..{experts - 1}"
    if (ids.sort(dim=-1).values.diff(dim=-1) == 0).any():
        return False, "an expert is selected twice for one token"
    got = sel.gather(-1, ids)
    unordered = ~_near(got[:, 1:], got[:, :-1])
    if unordered.any():
        t, j = (int(v) for v in unordered.nonzero()[0])
        return False, (f"ids not in descending order of score; token {t}, rank {j + 1}: expert {int(ids[t, j + 1])} "
                       f"(score {float(got[t, j + 1]):.6g}) after expert {int(ids[t, j])} (score {float(got[t, j]):.6g})")
    weakest = got.min(dim=-1).values[:, None]
    chosen = torch.zeros(tokens, experts, dtype=torch.bool, device=sel.device).scatter(1, ids, True)
    if groups is None:
        eligible = torch.ones_like(chosen)
    else:
        n_group, topk_group = groups
        per = experts // n_group
        gs = group_scores(sel, n_group)
        threshold = gs.topk(topk_group, dim=-1).values[:, -1:]
        admissible = _near(threshold, gs)                     # could be among the top topk_group groups
        required = ~_near(gs, threshold)                      # must be, whatever the rounding
        used = chosen.view(tokens, n_group, per).any(dim=-1)
        if (used & ~admissible).any():
            t = int((used & ~admissible).any(dim=-1).nonzero()[0])
            return False, (f"token {t}: an expert from group {int((used & ~admissible)[t].nonzero()[0])}, which is "
                           f"not among the {topk_group} groups of largest score")
        fixed = used | required
        if (fixed.sum(dim=-1) > topk_group).any():
            t = int((fixed.sum(dim=-1) > topk_group).nonzero()[0])
            return False, f"token {t}: experts from more than the {topk_group} groups of largest score"
        # the other slots go to admissible groups that hold no expert better than the weakest chosen
        best_other = sel.masked_fill(chosen, -float("inf")).view(tokens, n_group, per).max(dim=-1).values
        free = admissible & ~fixed & _near(best_other, weakest)
        short = fixed.sum(dim=-1) + free.sum(dim=-1) < topk_group
        if short.any():
            t = int(short.nonzero()[0])
            return False, (f"token {t}: its experts leave no top {topk_group} choice of groups in which they are "
                           f"the best {ids.shape[1]}")
        eligible = fixed.repeat_interleave(per, dim=1)
    beaten = eligible & ~chosen & ~_near(sel, weakest)
    if beaten.any():
        t, e = (int(v) for v in beaten.nonzero()[0])
        return False, (f"{int(beaten.any(dim=-1).sum())} of {tokens} tokens with wrong ids; token {t}: expert {e} "
                       f"(score {float(sel[t, e]):.6g}) not selected, expected {eids[t].tolist()}")
    wrong = _weights_off(w, weights(ids))
    if wrong:
        return False, wrong
    swaps = int((ids != eids.long().to(ids.device)).any(dim=-1).sum())
    return True, f"ok ({swaps} tokens with near-tie swaps accepted)" if swaps else "ok"


def check_router(route, router: str, logits: torch.Tensor, bias, k: int, extra: dict) -> tuple[bool, str]:
    """Route ``logits`` by ``route`` (a function of routing_cuda.route's signature: router, logits, bias, k,
    renormalize, n_group, topk_group) as ``router`` (plain, biased, softmax or grouped; ``extra`` its renormalize
    or n_group and topk_group) and check the output with that problem's check against its reference."""
    if router in ("plain", "biased"):
        inputs = (logits, bias if router == "biased" else None, k)
        return check(inputs, route(router, *inputs), topk_sigmoid(*inputs))
    if router == "softmax":
        inputs = (logits, k, extra["renormalize"])
        return check_softmax(inputs, route("softmax", logits, None, k, extra["renormalize"]), topk_softmax(*inputs))
    inputs = (logits, bias, k, extra["n_group"], extra["topk_group"])
    out = route("grouped", logits, bias, k, n_group=extra["n_group"], topk_group=extra["topk_group"])
    return check_grouped(inputs, out, grouped_topk(*inputs))
