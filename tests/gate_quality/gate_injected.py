"""Test-only technique for measuring the gate (scripts/gate_quality.py): eager fp32 plus an injected
change read from `gate_injection.json` beside this file, so base and head share this file's code hash
and differ only in that data, as a change elsewhere in a project would make them differ.

- "slowdown": a fraction (0.10 = 10%): each forward call also does fp32 matmuls calibrated, when the
  technique is applied, to take that fraction of the model's own forward time: the plain and the
  injected forward are timed alternately and the number of matmuls corrected until the measured
  ratio is within half a point + a twentieth of the target (10%: 9-11% slower; at most 8 passes);
  the ratio reached is reported in the row's technique_notes as `injected_ratio`, so the script
  knows what it really injected;
- "flip_every": N > 0: every N-th sample the prepared model sees gets a wrong top-1 (its logits
  rolled by one class), about 100/N points of held-out top-1 lost (inference only);
- "training": true (in base and head alike: scripts/gate_quality.py --training): the technique also
  joins the profile's training cases, where the slowdown is calibrated on a training step (forward
  and backward, alternately with and without the matmuls), not on the forward alone.

Not part of optbench: the script copies it into a scratch clone's techniques/ folder."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from optbench import Technique, register_technique

_SETTINGS = Path(__file__).with_name("gate_injection.json")


def _settings() -> dict[str, float]:
    try:
        return json.loads(_SETTINGS.read_text())
    except FileNotFoundError:
        return {}


def _step(call, inputs):
    """A training step of `call`: its forward and backward (the optimizer's update is left out:
    small, and the same with and without the matmuls)."""

    def step():
        out = call(*inputs)
        loss = out.float().sum() if isinstance(out, torch.Tensor) else out[0].float().sum()
        loss.backward()

    return step


def _ratio(plain, injected, rounds: int = 31) -> float:
    """Median over rounds of injected / plain, the two timed alternately (drift hits both alike)."""
    ratios = []
    for _ in range(rounds):
        start = time.perf_counter()
        plain()
        middle = time.perf_counter()
        injected()
        ratios.append((time.perf_counter() - middle) / (middle - start))
    return statistics.median(ratios)


@register_technique
class GateInjected(Technique):
    name = "gate_injected"
    family = "baseline"
    # A training form only when asked, so that every other selection keeps its cases as they are.
    modes = frozenset({"inference", "training"}) if _settings().get("training") else frozenset({"inference"})
    api = "gate_injection.json"
    description = "test only: eager plus an injected slowdown or accuracy drop (scripts/gate_quality.py)"

    def apply(self, prepared, ctx):
        settings = _settings()
        training = ctx.mode == "training"
        slowdown, flip_every = float(settings.get("slowdown", 0.0)), int(settings.get("flip_every", 0))
        flip_every = 0 if training else flip_every
        forward, inputs = prepared.forward, prepared.inputs
        work = torch.rand(128, 128)
        state = {"repeats": 0}
        seen = [0]

        def injected(*args):
            out = forward(*args)
            for _ in range(state["repeats"]):
                torch.mm(work, work)
            if flip_every and isinstance(out, torch.Tensor) and out.dim() == 2:
                index = torch.arange(seen[0], seen[0] + out.shape[0])
                seen[0] += out.shape[0]
                chosen = (index % flip_every) == 0
                if chosen.any():
                    out = out.clone()
                    out[chosen] = out[chosen].roll(1, dims=1)
            return out

        columns = {}
        if slowdown > 0:
            if training:  # calibrated on whole steps: the gate times steps, not forwards
                plain, stepped = _step(forward, inputs), _step(injected, inputs)
                mode = torch.enable_grad()
                # the steps leave gradients and move batch-norm statistics: put both back after
                saved = {k: v.detach().clone() for k, v in prepared.module.state_dict().items()}
            else:
                plain, stepped = (lambda: forward(*inputs)), (lambda: injected(*inputs))
                mode = torch.inference_mode()
            with mode:
                for _ in range(3):  # warm up
                    plain()
                start = time.perf_counter()
                plain()
                model_s = time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(20):
                    torch.mm(work, work)
                unit_s = (time.perf_counter() - start) / 20
                state["repeats"] = max(1, round(slowdown * model_s / unit_s))  # first guess, then measured
                for _ in range(8):
                    # The matmuls' share of the injected call, from the measured ratio, scaled to the target.
                    reached = _ratio(plain, stepped, rounds=11 if training else 31)
                    if abs(reached - 1 - slowdown) <= 0.005 + 0.05 * slowdown:
                        break
                    state["repeats"] = max(1, round(state["repeats"] * slowdown / max(reached - 1, 1e-3)))
                columns = {"injected_ratio": round(reached, 4), "injected_matmuls": state["repeats"]}
            if training:
                prepared.module.zero_grad(set_to_none=True)
                prepared.module.load_state_dict(saved)
        return prepared.then(self.api, forward=injected, columns=columns)


def _join_profiles() -> None:
    """A profile with its own techniques (the gate's) times the injected case beside its own
    inference cases (and training cases, with "training"), so the script measures the gate on exactly
    the gated selection plus this case."""
    from dataclasses import replace

    from optbench.matrix import profiles

    modes = sorted(GateInjected.modes)
    for name, profile in list(profiles.PROFILES.items()):
        if profile.techniques is None:
            continue
        own = dict(profile.techniques)
        for mode in modes:
            if CASE not in own.get(mode, ()):
                own[mode] = (*own.get(mode, ()), CASE)
        profiles.PROFILES[name] = replace(profile, techniques=own)


CASE = GateInjected.name
_join_profiles()
