"""L2: a training step certified across accumulation and ranks (kcert.certify_step, kcert step).

The default suite runs real 2-rank gloo steps (processes kcert launches) on a tiny model: a correct
data-parallel step that must not FAIL and a mean-of-rank-means step that must FAIL with the
aggregation named, the rank pool's failures (a rank that raises, dies or hangs), the batch split,
and the command line. The control family (tests/test_controls_step.py) holds the study."""

import json
import os

import pytest
import torch

import kcert
from kcert.casefile import import_file
from kcert.step.batch import diagnosis_cells, plan, unpack
from kcert.step.files import load_steps, parse_config
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples", "training_steps.py")
# the documented example's model, loss and steps are the subjects (a correct step and mean of means)
example = import_file(EXAMPLES, "step file")
model, loss, token_weighted, rank_means = example.model, example.loss, example.token_weighted, example.mean_of_means
VOCAB = example.VOCAB


def raises_on_rank_1(model, ctx):
    if ctx.rank == 1:
        raise ValueError("rank one refuses")
    return token_weighted(model, ctx)


def dies_on_rank_1(model, ctx):
    if ctx.rank == 1:
        os._exit(3)
    return token_weighted(model, ctx)


def hangs_rank_1(model, ctx):
    if ctx.rank == 0:  # rank 0 skips the collective rank 1 waits in
        return loss(model, ctx.micro_batches[0])
    return token_weighted(model, ctx)


BATCH = kcert.TokenBatch(sequences=4, length=8, vocab=VOCAB, min_length=3, prompt=2)  # a small batch: fast
TWO_RANKS = kcert.StepConfig(world=2)


def step(prod, name="tiny", **kwargs):
    return kcert.Step(name=name, model=model, loss=loss, prod=prod, batch=BATCH, dtype=torch.bfloat16,
                      configs=[TWO_RANKS], **kwargs)


@pytest.fixture(scope="module")
def defect():
    return kcert.certify_step(step(rank_means, "rank_means"), replicates=64, max_replicates=64)


# --- two ranks on gloo: the CI case ----------------------------------------------------------------


def test_two_gloo_ranks_certify_a_correct_data_parallel_step():
    result = kcert.certify_step(step(token_weighted), replicates=128, max_replicates=128)
    (config,) = result.configs
    assert config.config.world == 2 and result.verdict is not Verdict.FAIL
    assert config.certificate.gates["algebra"] is Verdict.PASS  # real mode ran on the ranks too (float64 steps)
    assert set(dict(config.rank_disagreement).values()) == {0.0}  # every rank holds the reduced gradients
    assert config.cost.calls["prod_real"] == 40  # the identity test's 20 points at float64 and float32
    assert config.cost.calls["prod"] < 128  # replicates travel in stacks: far fewer message rounds than replicates


def test_mean_of_rank_means_fails_and_the_diagnosis_names_it(defect):
    (config,) = defect.configs
    assert config.verdict is Verdict.FAIL
    found = {d.output: d for d in config.diagnoses}
    for output in ("grad", "grad.0.weight", "grad.3.weight"):
        f = found[output].finding
        assert f.status == "hypothesis" and f.hypothesis == "token/mean", (output, f)
        assert "mean over the 2 ranks of each rank's own mean" in found[output].sentence
        assert f.residual <= 4 * f.yardstick < f.deviation
    # the loss of this model moves by little (every token costs about log V): rounding, or the same aggregation
    loss = found["loss"].finding
    assert loss.status == "agrees" or loss.hypothesis == "token/mean", loss
    assert "deviates" in defect.dependence


def test_report_renders_the_configuration_table_in_json_html_and_terminal(defect, tmp_path):
    from rich.console import Console

    from kcert.report import step as render

    payload = json.loads(render.dumps(defect))
    assert payload["schema"] == "kcert.step-certificate/1" and payload["verdict"] == "FAIL"
    row = payload["configurations"][0]
    assert row["label"] == "n=2 data" and row["certificate"]["schema"] == "kcert.certificate/1"
    assert {d["output"] for d in row["diagnosis"]} >= {"loss", "grad", "grad.3.bias"}
    assert set(row["cost"]) >= {"ref_s", "oracle_s", "ranks_s", "kcert_s", "launch_s"}
    page = render.render_html(defect)
    assert page.startswith("<!doctype html>") and "n=2 data" in page and "mean over the 2 ranks" in page
    console = Console(record=True, width=160)
    render.render(defect, console)
    text = console.export_text()
    assert "configuration dependence" in text and "FAIL" in text and "reproduce: kcert.certify_step(" in text


# --- the rank pool's failures -------------------------------------------------------------------------


@pytest.mark.parametrize("prod, words", [
    (raises_on_rank_1, ["rank 1 of 2", "ValueError: rank one refuses", "test_step.py"]),
    (dies_on_rank_1, ["rank 1 of 2", "died (exit code 3)"]),
])
def test_a_failing_rank_is_named_with_the_replicate(prod, words):
    with pytest.raises(kcert.KernelError) as error:
        kcert.certify_step(step(prod), replicates=16, max_replicates=16, diagnosis_replicates=0)
    text = str(error.value)
    for word in words:
        assert word in text, text
    assert "replicate" in text  # the runner names the replicate(s) and the seed


def test_a_rank_stuck_in_a_collective_times_out_with_a_clear_error():
    with pytest.raises(kcert.KernelError) as error:
        kcert.certify_step(step(hangs_rank_1), replicates=16, max_replicates=16, diagnosis_replicates=0,
                           rank_timeout=5)
    assert "rank 1" in str(error.value) and "did not answer" in str(error.value)


# --- the batch and its split -----------------------------------------------------------------------------


def test_token_batch_draws_variable_lengths_padding_and_ignored_prompts():
    probe = kcert.TokenBatch(sequences=64, length=16, vocab=50, min_length=4, prompt=3)
    batch = unpack(probe.sample(torch.Generator().manual_seed(1), torch.device("cpu"), torch.float32))
    lengths = batch["attention_mask"].sum(1)
    assert int(lengths.min()) >= 4 and int(lengths.max()) == 16 and len(set(lengths.tolist())) > 5
    assert bool((batch["input_ids"][batch["attention_mask"] == 0] == 0).all())  # padding
    assert bool((batch["labels"][:, 0] == -100).any()) and bool((batch["labels"] != -100).sum(1).ge(1).all())
    assert torch.equal(batch["shift_labels"][:, :-1], batch["labels"][:, 1:])
    with pytest.raises(kcert.CaseError, match="prompt"):
        kcert.TokenBatch(sequences=2, length=8, vocab=4, min_length=3, prompt=3)


def test_split_follows_array_split_and_counts_tokens():
    batch = unpack(kcert.TokenBatch(sequences=7, length=10, vocab=9, prompt=1).sample(
        torch.Generator().manual_seed(0), torch.device("cpu"), torch.float32))
    total = int((batch["shift_labels"] != -100).sum())
    data = plan(batch, kcert.StepConfig(accumulation=4, window=3, world=2))
    assert [(c.rank, c.micro, c.rows) for c in data] == [(0, 0, (0, 2)), (0, 1, (2, 3)), (0, 2, (3, 4)),
                                                         (1, 0, (4, 5)), (1, 1, (5, 6)), (1, 2, (6, 7))]
    context = plan(batch, kcert.StepConfig(world=3, split="context"))
    assert [c.columns for c in context] == [(0, 4), (4, 7), (7, 10)]
    tensor = diagnosis_cells(batch, kcert.StepConfig(world=2, split="tensor"))
    for cells in (data, context, tensor):
        assert sum(c.tokens for c in cells) == total
    only = unpack(torch.stack([batch["input_ids"], batch["attention_mask"], context[1].only(batch, -100)["labels"]]))
    assert int((only["shift_labels"] != -100).sum()) == context[1].tokens  # labels and shifted labels agree
    with pytest.raises(kcert.CaseError, match="needs at least one per rank"):
        plan(batch, kcert.StepConfig(accumulation=4, world=2))


def test_configurations_parse_and_validate():
    assert parse_config("k=4,window=3") == kcert.StepConfig(accumulation=4, window=3)
    assert parse_config("n=2, split=context") == kcert.StepConfig(world=2, split="context")
    for bad, words in (("k=two", "integer"), ("q=2", "KEY=VALUE"), ("n=2,split=pipeline", "split")):
        with pytest.raises(kcert.CaseError, match=words):
            parse_config(bad)
    with pytest.raises(kcert.CaseError, match="cannot exceed"):
        kcert.StepConfig(accumulation=2, window=3)
    with pytest.raises(kcert.CaseError, match="configs lists a configuration twice"):
        kcert.Step(name="x", model=model, loss=loss, prod=token_weighted, batch=BATCH, configs=[TWO_RANKS, TWO_RANKS])


def test_step_files_load_by_name():
    assert [s.name for s in load_steps(EXAMPLES)] == ["token_weighted", "mean_of_means"]
    with pytest.raises(kcert.CaseFileError, match="no step named 'nope'"):
        load_steps(EXAMPLES, ["nope"])


def test_command_line_certifies_a_step_file(tmp_path, capsys):
    from kcert.cli import main

    out = tmp_path / "step.json"
    code = main(["step", EXAMPLES, "--step", "mean_of_means", "--config", "k=2", "-R", "64", "--max-replicates", "64",
                 "--diagnosis-replicates", "4", "--json", str(out)])
    assert code == 1
    payload = json.loads(out.read_text())
    assert payload["step"] == "mean_of_means" and payload["configurations"][0]["label"] == "k=2"
    assert "--config k=2" in payload["command"]
    assert main(["step", EXAMPLES, "--config", "k=zero"]) == 2
    assert "must be an integer" in capsys.readouterr().err


def no_real_mode(model, ctx):
    if ctx.real is not None:
        raise RuntimeError("this step has a float32-only kernel")
    return token_weighted(model, ctx)


def test_a_step_that_cannot_run_in_real_mode_skips_the_algebra_gate_and_keeps_its_ranks():
    # the ranks raise in real mode (the identity test): prod is opaque there, the precision ladder runs (the
    # ranks compute a bf16 step whatever they are given: a same-precision comparison at bfloat16, whose bound
    # is far above a quarter of a harm ULP, so it cannot resolve), fresh ranks finish the run
    result = kcert.certify_step(step(no_real_mode), replicates=16, max_replicates=16, diagnosis_replicates=0)
    cert = result.configs[0].certificate
    assert cert.gates["algebra"] is Verdict.SKIPPED and "above the 0.25 harm ULP" in cert.algebra.reason
    assert cert.provenance.replicates == 16 and Verdict.FAIL not in cert.gates.values()


def test_command_line_step_that_stops_unexpectedly_is_one_line_exit_2(monkeypatch, capsys):
    """`kcert step` runs each step through the shared command run: an unexpected exception is exit 2 in one
    line naming the step (--traceback prints it whole), SIGTERM is 143."""
    import kcert.step
    from kcert.cli import main
    from kcert.commands.runtime import Terminated

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(kcert.step, "certify_step", broken)
    assert main(["step", EXAMPLES, "--step", "mean_of_means"]) == 2
    err = capsys.readouterr().err
    assert "case 'mean_of_means': kcert stopped on an unexpected ZeroDivisionError" in err and "Traceback" not in err
    assert main(["step", EXAMPLES, "--step", "mean_of_means", "--traceback"]) == 2
    assert "Traceback" in capsys.readouterr().err

    def terminated(*args, **kwargs):
        raise Terminated

    monkeypatch.setattr(kcert.step, "certify_step", terminated)
    assert main(["step", EXAMPLES, "--step", "mean_of_means"]) == 143
    assert "terminated (SIGTERM) in step 'mean_of_means'" in capsys.readouterr().err
