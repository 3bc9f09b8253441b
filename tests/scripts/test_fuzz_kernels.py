"""The kernel fuzzer: random graphs from both families checked, failures reported with the seed
that rebuilds them and a failing exit code."""

import json


def _lines(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_a_fixed_run_of_random_graphs_and_configs_matches_the_reference(load_script, capsys):
    fuzz = load_script("fuzz_kernels")
    assert fuzz.main(["--count", "12", "--seed", "0", "--configs", "1"]) == 0
    *failures, summary = _lines(capsys)
    assert failures == [] and summary["graphs"] == 12 and summary["failed"] == 0


def test_a_wrong_kernel_is_reported_with_its_seed(load_script, capsys, monkeypatch):
    import akg.verify

    fuzz = load_script("fuzz_kernels")
    real = akg.verify.Reference.of
    monkeypatch.setattr(akg.verify.Reference, "of", staticmethod(
        lambda graph, inputs: real(graph, {k: v * 2 + 1 for k, v in inputs.items()})))
    assert fuzz.main(["--count", "1", "--seed", "5", "--configs", "0", "--family", "chains"]) == 1
    first, summary = _lines(capsys)
    assert first["seed"] == 5 and first["config"] == "default" and first["mismatch"]
    assert summary["failed"] == 1 and summary["next_seed"] == 6
