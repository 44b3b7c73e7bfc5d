from optbench.matrix.case import Case, Selection, build_matrix


def _select(**kw):
    base = dict(
        models=["resnet18"],
        techniques=["eager", "bf16_autocast"],
        devices=["cpu"],
        batch_sizes=None,
        profile="smoke",
    )
    base.update(kw)
    return Selection(**base)


def test_ids_are_readable_and_baseline_comes_first_in_each_group(registries):
    cases = build_matrix(
        _select(
            models=["resnet18", "lstm_classifier"], techniques=["bf16_autocast", "eager"], batch_sizes=[1, 4]
        ),
        "inference",
    )
    assert [c.id for c in cases] == [
        "resnet18-eager-cpu-bs1",
        "resnet18-bf16_autocast-cpu-bs1",
        "resnet18-eager-cpu-bs4",
        "resnet18-bf16_autocast-cpu-bs4",
        "lstm_classifier-eager-cpu-bs1",
        "lstm_classifier-bf16_autocast-cpu-bs1",
        "lstm_classifier-eager-cpu-bs4",
        "lstm_classifier-bf16_autocast-cpu-bs4",
    ]
    assert all(c.skip_reason is None for c in cases)
    assert Case("resnet18", "compile", "cpu", 8, "training").id == "resnet18-compile-cpu-bs8-training"


def test_profile_batch_sizes_and_explicit_models_outside_the_profile(registries):
    assert [c.batch_size for c in build_matrix(_select(techniques=["eager"]), "inference")] == [2]
    # resnet50 is not in the smoke profile: named explicitly it runs at its default batch size.
    assert [
        c.batch_size for c in build_matrix(_select(models=["resnet50"], techniques=["eager"]), "inference")
    ] == [8]


def test_unsupported_cases_stay_in_the_matrix_with_a_reason(registries):
    import torch

    cases = {
        c.id: c
        for c in build_matrix(
            _select(
                models=["resnet18", "lstm_classifier"],
                techniques=["eager", "channels_last", "fp16_autocast"],
                devices=["cpu", "cuda"],
            ),
            "inference",
        )
    }
    assert len(cases) == 2 * 3 * 2
    assert (
        cases["lstm_classifier-channels_last-cpu-bs4"].skip_reason
        == "channels_last applies to 4-D image inputs only"
    )
    assert "does not run on cpu" in cases["resnet18-fp16_autocast-cpu-bs2"].skip_reason
    assert cases["resnet18-eager-cpu-bs2"].skip_reason is None
    if not torch.cuda.is_available():
        assert "cuda is not available" in cases["resnet18-eager-cuda-bs2"].skip_reason
    else:
        assert cases["resnet18-fp16_autocast-cuda-bs2"].skip_reason is None


def test_training_mode_is_not_claimed_by_inference_only_techniques(registries):
    (case,) = build_matrix(_select(techniques=["int8_static_fx"]), "training")
    assert case.skip_reason == "int8_static_fx has no training mode (modes: inference)"
    (trains,) = build_matrix(_select(techniques=["bf16_autocast"]), "training")
    assert trains.skip_reason is None


def test_default_matrix_of_each_mode_holds_only_techniques_of_that_mode(registries):
    from optbench.catalog.techniques import resolve

    for mode in ("inference", "training", "data"):
        cases = build_matrix(_select(techniques=None), mode)
        assert cases and all(mode in resolve(c.technique).modes for c in cases), mode
    names = {c.technique for c in build_matrix(_select(techniques=None), "data")}
    # persistent_workers and prefetch_<N> need workers: in stacks only, never alone
    assert "persistent_workers" not in names and any(n.endswith("+persistent_workers") for n in names)
