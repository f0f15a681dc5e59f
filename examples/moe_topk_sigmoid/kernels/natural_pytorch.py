"""The routing a user writes in PyTorch, as the models' own code does it: the headline baseline of the case
study's reports (speedups are stated over this, and over each problem's reference, which sorts stably to break
ties by the lower index). One entry per problem:

- topk_sigmoid: sigmoid scores, `torch.topk` on them (plus the bias, with one), the weights gathered and, with a
  bias, renormalised (DeepSeek-V3's and Kimi K2's gate with one group).
- topk_softmax: softmax in fp32, `torch.topk` on the probabilities, renormalised where asked (Mixtral's and
  Qwen3-MoE's gate).
- grouped_topk: DeepSeek-V3's gate: group scores from each group's top two, `torch.topk` of the groups, the
  other groups masked, `torch.topk` of the rest, renormalised.
"""

import torch


def topk_sigmoid(logits, bias, k):
    scores = torch.sigmoid(logits.float())
    if bias is None:
        w, ids = torch.topk(scores, k, dim=-1)
        return w, ids.to(torch.int32)
    _, ids = torch.topk(scores + bias, k, dim=-1)
    w = scores.gather(-1, ids)
    return w / w.sum(dim=-1, keepdim=True), ids.to(torch.int32)


def topk_softmax(logits, k, renormalize):
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    w, ids = torch.topk(probs, k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def grouped_topk(logits, bias, k, n_group, topk_group):
    scores = torch.sigmoid(logits.float())
    tokens, experts = scores.shape
    biased = scores + bias
    group_scores = biased.view(tokens, n_group, -1).topk(2, dim=-1).values.sum(dim=-1)
    group_idx = torch.topk(group_scores, topk_group, dim=-1, sorted=False).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(tokens, n_group, experts // n_group).reshape(tokens, experts)
    masked = biased.masked_fill(~score_mask.bool(), float("-inf"))
    _, ids = torch.topk(masked, k, dim=-1)
    w = scores.gather(-1, ids)
    return w / w.sum(dim=-1, keepdim=True), ids.to(torch.int32)
