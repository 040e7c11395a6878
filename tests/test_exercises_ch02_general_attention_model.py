"""Chapter 2 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.exercises import ch02_general_attention_model as ex
from attnsurvey.experiments.general_model import evaluate_match_query, fit_match_query
from attnsurvey.general_model import TaskModel
from attnsurvey.training import seed_everything


def loop_attend(q, K, V, scaled=True, stable=True):
    n_f, d_k = K.shape
    div = math.sqrt(d_k) if scaled else 1.0
    scores = [sum(float(q[i]) * float(K[l, i]) for i in range(d_k)) / div for l in range(n_f)]
    top = max(scores) if stable else 0.0
    exps = [math.exp(s - top) for s in scores]
    weights = [x / sum(exps) for x in exps]
    return [sum(weights[l] * float(V[l, j]) for l in range(n_f)) for j in range(V.shape[1])]


def test_ex1_rejects_unnormalised_weights():
    with pytest.raises(AssertionError):
        ex.check_ex1([1.0, 1.0, 1.0, 1.0], False)


def test_ex1_rejects_shift_changes_weights():
    with pytest.raises(AssertionError):
        ex.check_ex1([0.25] * 4, True)


def test_ex1_accepts_the_solution():
    assert "correct" in ex.check_ex1([0.25] * 4, False)


def test_ex2_rejects_a_missing_scale():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda q, K, V: loop_attend(q, K, V, scaled=False))


def test_ex2_rejects_an_overflowing_softmax():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda q, K, V: loop_attend(q, K, V, stable=False))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(loop_attend)


@pytest.fixture(scope="module")
def ex3_models():
    task = {k: v for k, v in ex.EX3_TASK.items() if k != "layout"}
    models, acc = {}, {}
    for pool in ("mean", "attention"):
        g = seed_everything(0)
        models[pool] = TaskModel(d_f=12, d_u=8, n_classes=4, d=32, pool=pool)
        fit_match_query(models[pool], 150, g, batch_size=64, layout="sequence", **task)
        acc[pool] = evaluate_match_query(
            models[pool], ex.EX3_EVAL_N, torch.Generator().manual_seed(ex.EX3_EVAL_SEED), **ex.EX3_TASK
        )["accuracy"]
    return models, acc


def test_ex3_rejects_accuracies_measured_on_16_items(ex3_models):
    models, acc = ex3_models
    task16 = dict(ex.EX3_TASK, n_items=16)
    wrong = {
        p: evaluate_match_query(m, ex.EX3_EVAL_N, torch.Generator().manual_seed(ex.EX3_EVAL_SEED), **task16)["accuracy"]
        for p, m in models.items()
    }
    with pytest.raises(AssertionError, match="n_items=32"):  # the hint names the slip
        ex.check_ex3(models["mean"], models["attention"], wrong["mean"], wrong["attention"])


def test_ex3_rejects_swapped_models(ex3_models):
    models, acc = ex3_models
    with pytest.raises(AssertionError):
        ex.check_ex3(models["attention"], models["mean"], acc["attention"], acc["mean"])


def test_ex3_rejects_an_untrained_attention_model(ex3_models):
    models, acc = ex3_models
    torch.manual_seed(0)
    fresh = TaskModel(d_f=12, d_u=8, n_classes=4, d=32, pool="attention")
    a = evaluate_match_query(fresh, ex.EX3_EVAL_N, torch.Generator().manual_seed(ex.EX3_EVAL_SEED), **ex.EX3_TASK)[
        "accuracy"
    ]
    with pytest.raises(AssertionError):
        ex.check_ex3(models["mean"], fresh, acc["mean"], a)


def test_ex3_accepts_the_solution(ex3_models):
    models, acc = ex3_models
    assert "correct" in ex.check_ex3(models["mean"], models["attention"], acc["mean"], acc["attention"])


@pytest.mark.parametrize("no", [False, 0, torch.tensor(False), pytest.param("np", id="numpy-bool")])
def test_ex1_accepts_false_of_any_type(no):
    if isinstance(no, str):
        import numpy as np

        no = np.False_
    assert "correct" in ex.check_ex1([0.25] * 4, no)


@pytest.mark.parametrize("stub", [None, "False"])
def test_ex1_rejects_the_stub_and_a_string(stub):
    with pytest.raises(AssertionError, match="True or False"):
        ex.check_ex1([0.25] * 4, stub)


def test_ex2_names_a_missing_normalisation_not_the_scale():
    def unnormalised(q, K, V):  # in numpy: torch's @ is forbidden in this exercise
        import numpy as np

        q, K, V = (np.asarray(x) for x in (q, K, V))
        e = K @ q / math.sqrt(K.shape[1])
        return np.exp(e - e.max()) @ V

    with pytest.raises(AssertionError, match="sum to one"):
        ex.check_ex2(unnormalised)


def test_ex2_names_the_scale_for_a_missing_scale():
    with pytest.raises(AssertionError, match="sqrt"):
        ex.check_ex2(lambda q, K, V: loop_attend(q, K, V, scaled=False))


def test_ex2_accepts_a_vectorised_numpy_answer():
    import numpy as np

    def vec(q, K, V):
        q, K, V = (np.asarray(x) for x in (q, K, V))
        e = K @ q / np.sqrt(K.shape[1])
        a = np.exp(e - e.max())
        return (a / a.sum()) @ V

    assert "correct" in ex.check_ex2(vec)


def test_ex3_does_not_blame_n_items_for_a_wrong_evaluation_seed(ex3_models):
    models, acc = ex3_models
    other = {
        p: evaluate_match_query(m, ex.EX3_EVAL_N, torch.Generator().manual_seed(ex.EX3_EVAL_SEED + 1), **ex.EX3_TASK)[
            "accuracy"
        ]
        for p, m in models.items()
    }
    with pytest.raises(AssertionError, match="EX3_EVAL_SEED") as err:
        ex.check_ex3(models["mean"], models["attention"], other["mean"], other["attention"])
    assert "n_items" not in str(err.value)


def test_hidden_ex1_accepts_the_solution_and_rejects_rounded_weights():
    ex.hidden_check_ex1([0.25, 0.25, 0.25, 0.25], False)
    rounded = [0.2500004, 0.2500004, 0.2499996, 0.2499996]
    assert "correct" in ex.check_ex1(rounded, False)  # within the visible check's tolerance ...
    with pytest.raises(AssertionError, match="not exact"):
        ex.hidden_check_ex1(rounded, False)  # ... not the hidden one


def test_hidden_ex2_accepts_the_solution_and_rejects_a_scale_fixed_to_six():
    ex.hidden_check_ex2(loop_attend)

    def fixed(q, K, V):
        import numpy as np

        q, K, V = (np.asarray(x) for x in (q, K, V))
        e = K @ q / math.sqrt(6)  # the visible check's d_k, typed in
        a = np.exp(e - e.max())
        return (a / a.sum()) @ V

    assert "correct" in ex.check_ex2(fixed)
    with pytest.raises(AssertionError, match="key size"):
        ex.hidden_check_ex2(fixed)


def test_hidden_ex3_accepts_the_solution_and_rejects_an_untrained_attention_model(ex3_models):
    models, _ = ex3_models
    ex.hidden_check_ex3(models["mean"], models["attention"])
    torch.manual_seed(0)
    fresh = TaskModel(d_f=12, d_u=8, n_classes=4, d=32, pool="attention")
    with pytest.raises(AssertionError, match="not clearly ahead"):
        ex.hidden_check_ex3(models["mean"], fresh)


@pytest.mark.parametrize("check", [ex.check_ex2, ex.hidden_check_ex2])
def test_ex2_rejects_a_function_that_reuses_attend_or_torch_softmax(check):
    from attnsurvey import general_model as gm

    def reuse(q, K, V):  # what the chapter displays: it passes only by not writing the loops
        return gm.attend(q[None], K, V)[0][0]

    def vectorised_torch(q, K, V):
        return torch.softmax(K @ q / math.sqrt(K.shape[1]), -1) @ V

    for fn in (reuse, vectorised_torch):
        with pytest.raises(AssertionError, match="loops and scalars only"):
            check(fn)
